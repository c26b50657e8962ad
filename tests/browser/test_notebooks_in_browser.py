"""Every notebook in a real browser, as a learner runs it: JupyterLab in Chromium, Run All, then
every control of every explorer changed once and back, each time checking that the picture is
redrawn and timing the redraw.

What "an explorer" is comes from the DOM, not from a list of names: a widget output that holds an
`ipywidgets.Image` (`img.widget-image`). Its controls are the ipywidgets inside it (sliders of every
kind, Dropdown, ToggleButtons, Checkbox, Text); any other interactive widget fails the test, so a
new kind of control is noticed instead of silently left untested.

Safety: JupyterLab serves a temporary copy of notebooks/, with autosave turned off in a temporary
settings directory, and the last test checks that no notebook in the repository changed.

Needs the `playwright` pip package (in the test extra) and a system Chromium; never
`playwright install`, and a font with Chinese glyphs (`fc-list :lang=zh`; Debian: fonts-noto-cjk)
for the bilingual headings. Without either the test fails under CI=true and skips loudly elsewhere.
Run it with `pytest tests/browser` (a plain `pytest tests` leaves it out, see pyproject.toml).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK_DIR = REPO / "notebooks"
NOTEBOOKS = sorted(p.name for p in NOTEBOOK_DIR.glob("*.ipynb"))
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
CJK_CHECK = "fc-list :lang=zh"
CJK_HINT = "install one with `apt-get install fonts-noto-cjk` (Debian/Ubuntu; .ci/run does this)"
INSTALL_HINT = (
    "install it with `apt-get install chromium` (Debian/Ubuntu; .ci/run does this), "
    "or set ATTNLAB_CHROMIUM to a Chromium/Chrome binary"
)
SERVER_START_S = 90  # JupyterLab up and answering
RUN_ALL_S = 240  # one notebook's Run All
RENDER_S = 60  # widget views rendered after the run
CHANGE_S = 20  # one control change -> new image
# The learner's settings for this run: nothing written back, every cell in the DOM, no network.
LAB_SETTINGS = {
    "@jupyterlab/docmanager-extension:plugin": {"autosave": False},
    "@jupyterlab/notebook-extension:tracker": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False},
}


# --- finding the browser ------------------------------------------------------------------------


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def find_chromium() -> str | None:
    """ATTNLAB_CHROMIUM if set, else the first Chromium/Chrome on PATH, else /usr/bin/chromium."""
    env = os.environ.get("ATTNLAB_CHROMIUM")
    if env:
        return env if os.access(env, os.X_OK) else None
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if shutil.which(name):
            return shutil.which(name)
    return "/usr/bin/chromium" if os.access("/usr/bin/chromium", os.X_OK) else None


def browser_tools(config):
    """(playwright's sync_playwright, the Chromium binary), or the test is failed or skipped by
    `require` when either is missing."""
    config._attnlab_browser_missing = getattr(config, "_attnlab_browser_missing", [])
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
    require(
        config,
        sync_playwright is not None,
        "the `playwright` package is not installed (it is in the test extra: pip install -e '.[test]')",
    )
    chromium = find_chromium()
    require(config, chromium is not None, f"no Chromium/Chrome found; {INSTALL_HINT}")
    require(
        config,
        has_cjk_font(),
        f"no font with Chinese glyphs ({CJK_CHECK} lists none), so the "
        f"notebooks' Chinese headings would show as empty boxes; {CJK_HINT}",
    )
    return sync_playwright, chromium


def has_cjk_font() -> bool:
    """Whether fontconfig knows a font that covers Chinese (what Chromium on Linux falls back to)."""
    if not shutil.which("fc-list"):
        return False
    out = subprocess.run(CJK_CHECK.split(), capture_output=True, text=True, check=False).stdout
    return bool(out.strip())


def require(config, ok: bool, what: str) -> None:
    """Not being able to run the browser test is never quiet: a failure under CI, else a named skip
    that conftest.py repeats in a banner at the end of the run."""
    if ok:
        return
    msg = f"BROWSER TEST NOT RUN: {what}"
    config._attnlab_browser_missing.append(msg)
    if in_ci():
        pytest.fail(msg + " (CI is set, so this fails instead of skipping)", pytrace=False)
    pytest.skip(msg)


def _digest(paths) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}


def _ansi_free(s: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", s)


def _clip(s: str, head: int = 300, tail: int = 1500) -> str:
    """A traceback's first line and its last frames (where the error was raised)."""
    return s if len(s) <= head + tail else f"{s[:head]}\n    [...]\n{s[-tail:]}"


# --- JupyterLab + Chromium ----------------------------------------------------------------------

JS_SETUP = """() => {
  // Timestamps of the learner's input events (capture phase, before any widget handler runs).
  window.__armed = false; window.__ev = {};
  for (const type of ['keydown', 'click', 'input', 'change']) {
    document.addEventListener(type, () => {
      if (window.__armed && !(type in window.__ev)) window.__ev[type] = performance.now();
    }, true);
  }
}"""

JS_USER_SETTINGS = """async (id) => {
  const p = await window.jupyterapp.serviceManager.settings.fetch(id);
  return p.settings;
}"""

JS_OPEN = """async (path) => {
  const app = window.jupyterapp;
  const w = await app.commands.execute('docmanager:open', {path, factory: 'Notebook'});
  await w.context.ready;
  await w.sessionContext.ready;
  app.shell.activateById(w.id);
  window.__nb = w;
  window.__kerr = []; window.__phase = 'open';
  // Everything the kernel reports as an error or on stderr, whether from a cell or from a widget
  // callback (those never reach a cell's output area), is collected here; comm_close is kept to
  // recognise one harmless startup message (see BENIGN below).
  w.sessionContext.session.kernel.iopubMessage.connect((_, msg) => {
    const t = msg.header.msg_type, c = msg.content, p = msg.parent_header || {};
    const base = {type: t, phase: window.__phase, parent_type: p.msg_type || null, parent_id: p.msg_id || null};
    if (t === 'error') window.__kerr.push({...base, text: c.ename + ': ' + c.evalue + '\\n' + (c.traceback || []).join('\\n')});
    else if (t === 'stream' && c.name === 'stderr') window.__kerr.push({...base, text: c.text});
    else if (t === 'comm_close') window.__kerr.push({...base, comm_id: c.comm_id});
  });
  await app.commands.execute('notebook:clear-all-cell-outputs');
  return w.sessionContext.session.kernel.name;
}"""

JS_STATE = """() => {
  const nb = window.__nb, kernel = nb.sessionContext.session?.kernel;
  const cells = nb.content.widgets.filter(c => c.model.type === 'code' && c.model.sharedModel.getSource().trim());
  const pending = cells.filter(c => c.model.executionCount === null)
                       .map(c => nb.content.widgets.indexOf(c));
  const dom = (sel) => Array.from(nb.node.querySelectorAll(sel)).map(e => e.textContent.slice(0, 2000));
  return {status: kernel?.status, pending, code_cells: cells.length, kernel_errors: window.__kerr,
          error_outputs: dom('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.error"]'),
          stderr_outputs: dom('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'),
          widget_errors: dom('.jp-OutputArea-output').filter(t => t.includes('Error displaying widget'))};
}"""

JS_RUN_DONE = """() => {
  const nb = window.__nb, kernel = nb.sessionContext.session?.kernel;
  if (kernel?.status !== 'idle') return false;
  if (window.__kerr.some(e => e.type === 'error')) return true;   // an error stops Run All: report it
  return nb.content.widgets.every(c => c.model.type !== 'code' || !c.model.sharedModel.getSource().trim()
                                       || c.model.executionCount !== null);
}"""

JS_WIDGETS_RENDERED = """() => {
  const nb = window.__nb;
  let expected = 0;
  for (const c of nb.content.widgets) {
    if (c.model.type !== 'code') continue;
    for (const o of c.model.outputs.toJSON())
      if (o.data && o.data['application/vnd.jupyter.widget-view+json']) expected++;
  }
  const rendered = nb.node.querySelectorAll('.jp-OutputArea-output > .jupyter-widgets').length;
  const imgs = Array.from(nb.node.querySelectorAll('.jp-OutputArea-output img.widget-image'));
  return rendered >= expected && imgs.every(i => i.src && i.complete);
}"""

JS_EXPLORERS = """() => {
  const nb = window.__nb;
  const roots = [];
  for (const img of nb.node.querySelectorAll('.jp-OutputArea-output img.widget-image')) {
    const out = img.closest('.jp-OutputArea-output');
    const root = out.querySelector(':scope > .jupyter-widgets') || out;
    if (!roots.includes(root)) roots.push(root);
  }
  window.__explorers = roots;
  // A widget output with controls but no image is an explorer whose picture did not render.
  const imageless = Array.from(nb.node.querySelectorAll('.jp-OutputArea-output > .jupyter-widgets'))
    .filter(w => !roots.includes(w) && w.querySelector('input, select, button, .noUi-handle'))
    .map(w => nb.content.widgets.findIndex(c => c.node === w.closest('.jp-Cell')));
  return {imageless, explorers: roots.map(root => {
    const cellNode = root.closest('.jp-Cell');
    const cell = nb.content.widgets.findIndex(c => c.node === cellNode);
    return {cell, source: cell >= 0 ? nb.content.widgets[cell].model.sharedModel.getSource() : '',
            images: root.querySelectorAll('img.widget-image').length};
  })};
}"""

# Controls of explorer i, in screen order: every interactive element inside it (input, select,
# button, slider handle, editable readout), grouped by the widget it belongs to. Display-only
# widgets (HTML, Label) have none; an interactive element outside the five known kinds is
# reported as 'unknown', so a new kind of control fails instead of going untested.
JS_CONTROLS = """(i) => {
  const root = window.__explorers[i];
  const kinds = [['.widget-slider', 'slider'], ['.widget-dropdown', 'dropdown'],
                 ['.widget-toggle-buttons', 'toggle'], ['.widget-checkbox', 'checkbox'], ['.widget-text', 'text']];
  const els = [], out = [];
  for (const x of root.querySelectorAll('input, select, button, textarea, .noUi-handle, [contenteditable="true"]')) {
    let el = x, kind = 'unknown';
    for (const [sel, k] of kinds) {
      const c = x.closest(sel);
      if (c && root.contains(c)) { el = c; kind = k; break; }
    }
    if (els.includes(el)) continue;
    const label = el.querySelector('.widget-label-basic span') || el.querySelector('.widget-label') || el;
    const disabled = el.matches('[disabled]') || !!el.querySelector('[disabled]');
    els.push(el);
    out.push({kind, label: (label.textContent || '').trim().slice(0, 40), classes: el.className, disabled});
  }
  window.__controls = els;
  const img = root.querySelector('img.widget-image');
  window.__img = img;
  if (!img.__timed) {                       // when the new src arrives, and when it is decoded
    img.__timed = true;
    new MutationObserver(() => {
      if (window.__armed && window.__img === img) {
        window.__srcCount++;
        if (window.__srcAt === null) window.__srcAt = performance.now();
      }
    }).observe(img, {attributes: true, attributeFilter: ['src']});
    img.addEventListener('load', () => {
      if (window.__armed && window.__img === img && window.__loadAt === null) window.__loadAt = performance.now();
    });
  }
  root.scrollIntoView({block: 'start'});
  return out;
}"""

JS_ARM = """() => {
  window.__old = window.__img.src; window.__ev = {}; window.__srcAt = null; window.__loadAt = null;
  window.__srcCount = 0; window.__armed = true;
}"""

JS_CHANGED = "() => window.__img.src !== window.__old"
JS_SETTLED = """() => window.__loadAt !== null
                  && window.__nb.sessionContext.session?.kernel?.status === 'idle'"""
JS_READ = """() => { window.__armed = false;
  return {ev: window.__ev, src: window.__srcAt, load: window.__loadAt, count: window.__srcCount}; }"""

JS_CLOSE = """async () => {
  const w = window.__nb;
  if (!w) return;
  window.__nb = null;
  try { await w.sessionContext.shutdown(); } finally { w.dispose(); }
}"""


class Lab:
    """One JupyterLab server on a temporary copy of notebooks/ and one Chromium page on it."""

    def __init__(self, tmp: Path, chromium: str, playwright):
        self.tmp = tmp
        self.root = tmp / "notebooks"
        shutil.copytree(NOTEBOOK_DIR, self.root, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
        settings = tmp / "lab-settings"
        for plugin, values in LAB_SETTINGS.items():
            package, name = plugin.split(":")
            (settings / package).mkdir(parents=True, exist_ok=True)
            (settings / package / f"{name}.jupyterlab-settings").write_text(json.dumps(values))
        # The kernel should see what a learner's kernel sees: no test-only variables.
        env = {k: v for k, v in os.environ.items() if k not in ("MPLBACKEND", "TRITON_INTERPRET")}
        env.update(
            JUPYTERLAB_SETTINGS_DIR=str(settings),
            JUPYTERLAB_WORKSPACES_DIR=str(tmp / "ws"),
            JUPYTER_CONFIG_DIR=str(tmp / "config"),
            JUPYTER_DATA_DIR=str(tmp / "data"),
            JUPYTER_RUNTIME_DIR=str(tmp / "runtime"),
        )
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = tmp / "jupyterlab.log"
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jupyter",
                "lab",
                "--no-browser",
                "--allow-root",
                "--ServerApp.token=",
                "--ServerApp.password=",
                f"--port={port}",
                "--ServerApp.ip=127.0.0.1",
                "--ServerApp.port_retries=0",
                "--LabApp.expose_app_in_browser=True",
                "--LabApp.extension_manager=readonly",
                "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
                f"--ServerApp.root_dir={self.root}",
            ],
            env=env,
            cwd=tmp,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self.browser = None
        try:
            self._wait_for_server()
            self._start_browser(chromium, playwright)
        except BaseException:
            self.close()
            raise

    def _start_browser(self, chromium: str, playwright) -> None:
        self.browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, headless=True)
        self.page = self.browser.new_page(viewport={"width": 1400, "height": 1000})
        self.page_errors: list[str] = []
        self.console_errors: list[str] = []
        self.page.on("pageerror", lambda e: self.page_errors.append(str(e)))
        self.page.on("console", lambda m: self.console_errors.append(m.text) if m.type == "error" else None)
        self.page.goto(self.url + "/lab", wait_until="domcontentloaded")
        self.page.wait_for_function("() => window.jupyterapp", timeout=SERVER_START_S * 1000)
        self.page.evaluate("async () => { await window.jupyterapp.restored; }")
        self.page.evaluate(JS_SETUP)
        for plugin, values in LAB_SETTINGS.items():  # the overrides really took effect
            got = self.page.evaluate(JS_USER_SETTINGS, plugin)
            assert got and all(got.get(k) == v for k, v in values.items()), (
                f"JupyterLab ignored the test's settings for {plugin}: {got}"
            )

    def _wait_for_server(self) -> None:
        deadline = time.monotonic() + SERVER_START_S
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: no proxy
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"JupyterLab exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                direct.open(self.url + "/api/status", timeout=2)
                return
            except OSError:
                time.sleep(0.25)
        raise RuntimeError(f"JupyterLab did not answer within {SERVER_START_S} s:\n{self.log_tail()}")

    def log_tail(self, n: int = 3000) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-n:]

    def state(self) -> dict:
        return self.page.evaluate(JS_STATE)

    def close(self) -> None:
        try:
            if self.browser is not None:
                self.browser.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self._log.close()


@pytest.fixture(scope="module")
def lab(request, tmp_path_factory):
    config = request.config
    sync_playwright, chromium = browser_tools(config)
    before = _digest(NOTEBOOK_DIR.glob("*.ipynb"))
    t0 = time.perf_counter()
    with sync_playwright() as pw:
        lab = Lab(tmp_path_factory.mktemp("browser"), chromium, pw)
        lab.repo_digest = before
        lab.copy_digest = _digest(lab.root.glob("*.ipynb"))
        import ipywidgets
        import jupyterlab

        config._attnlab_browser_meta = {
            "chromium": f"{chromium} {lab.browser.version}",
            "jupyterlab": jupyterlab.__version__,
            "ipywidgets": ipywidgets.__version__,
            "python": platform.python_version(),
            "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs",
            "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "measure": "ms from the input event (keydown/click/change, capture phase) to the "
            "<img> src attribute changing (median_ms) and to its load event (loaded)",
        }
        try:
            yield lab
        finally:
            lab.close()
            config._attnlab_browser_meta["total_s"] = round(time.perf_counter() - t0, 1)


# --- driving one control ------------------------------------------------------------------------


def _bumped_text(value: str) -> str:
    """A different valid-looking value for a text box: its last number plus one, else a '1' added."""
    m = None
    for m in re.finditer(r"-?\d+(?:\.\d+)?", value):
        pass
    if m is None:
        return value + "1"
    x = float(m.group())
    new = str(int(x) + 1) if x.is_integer() and "." not in m.group() else f"{x + 1:g}"
    return value[: m.start()] + new + value[m.end() :]


def _actions(page, j: int, kind: str):
    """[(what, do)] for control j: a change away from the current value and one back to it.
    `do` performs the input; the timing starts at the input event the widget reacts to."""
    el = page.evaluate_handle("(j) => window.__controls[j]", j).as_element()
    if kind == "slider":
        handle = el.query_selector(".noUi-handle")
        now, hi = (float(handle.get_attribute(a)) for a in ("aria-valuenow", "aria-valuemax"))
        there, back = ("ArrowRight", "ArrowLeft") if now < hi else ("ArrowLeft", "ArrowRight")

        def press(key):
            def do():
                handle.focus()
                page.keyboard.press(key)

            return do

        return [(there, press(there)), (back, press(back))]
    if kind == "dropdown":
        select = el.query_selector("select")
        n = select.evaluate("s => s.options.length")
        cur = select.evaluate("s => s.selectedIndex")
        if n < 2:
            return []
        other = (cur + 1) % n
        return [
            (f"option {other}", lambda: select.select_option(index=other)),
            (f"option {cur}", lambda: select.select_option(index=cur)),
        ]
    if kind == "toggle":
        buttons = el.query_selector_all("button")
        active = [b for b in buttons if "mod-active" in (b.get_attribute("class") or "")]
        others = [b for b in buttons if b not in active]
        if not others or not active:
            return []
        a, o = active[0], others[0]
        return [
            (f"click {o.text_content().strip()!r}", o.click),
            (f"click {a.text_content().strip()!r}", a.click),
        ]
    if kind == "checkbox":
        box = el.query_selector("input[type=checkbox]")
        return [("click", box.click), ("click back", box.click)]
    if kind == "text":
        box = el.query_selector("input")
        old = box.input_value()
        new = _bumped_text(old)

        def typed(value):
            def do():
                box.fill(value)
                box.press("Enter")

            return do

        return [(f"type {new!r} + Enter", typed(new)), (f"type {old!r} + Enter", typed(old))]
    raise AssertionError(f"no way to drive a {kind!r} control")


def _timed_change(page, kind: str, do) -> dict:
    """Perform one input and wait for the explorer's image to change; times in ms."""
    page.evaluate(JS_ARM)
    do()
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function(JS_CHANGED, timeout=CHANGE_S * 1000)
        page.wait_for_function(JS_SETTLED, timeout=CHANGE_S * 1000)
        changed = True
    except PlaywrightTimeout:
        changed = False
    r = page.evaluate(JS_READ)
    ev = r["ev"]
    if kind == "slider":
        t0 = ev.get("keydown")
    elif kind == "dropdown":
        t0 = min((ev[k] for k in ("input", "change") if k in ev), default=None)
    elif kind == "text":  # Enter commits; a continuously updating box would react to typing
        t0 = ev.get("keydown")
        if t0 is not None and r["src"] is not None and r["src"] < t0:
            t0 = ev.get("input")
    else:
        t0 = ev.get("click")
    return {
        "changed": changed,
        "renders": r["count"],
        "src_ms": None if t0 is None or r["src"] is None else r["src"] - t0,
        "loaded_ms": None if t0 is None or r["load"] is None else r["load"] - t0,
    }


def _call_line(source: str) -> str:
    """The explorer cell's call, e.g. `explore.io_vs_n()` (its last line, comment dropped)."""
    lines = [ln.split("#")[0].strip() for ln in source.splitlines()]
    lines = [ln for ln in lines if ln]
    return lines[-1] if lines else "?"


def _kernel_problems(entries: list[dict]) -> list[str]:
    """The kernel's errors and stderr, less one harmless message: ipywidgets' front end asks a new
    kernel for its widgets (a `jupyter.widget.control` comm) before the notebook has imported
    ipywidgets, and the kernel logs that the target is missing and, for the comm it then closes,
    "No such comm". A learner never sees either; anything else on stderr fails the test."""
    control_opens = {
        e["parent_id"]
        for e in entries
        if e["type"] == "stream"
        and e["text"].strip() == "No such comm target registered: jupyter.widget.control"
    }
    closed = {e["comm_id"] for e in entries if e["type"] == "comm_close" and e["parent_id"] in control_opens}
    benign = {"No such comm target registered: jupyter.widget.control"} | {
        f"No such comm: {c}" for c in closed
    }
    return [
        f"kernel {'stderr' if e['type'] == 'stream' else e['type']} (during {e['phase']}, in reply "
        f"to {e['parent_type']}): {_clip(_ansi_free(e['text']))}"
        for e in entries
        if e["type"] != "comm_close" and e["text"].strip() not in benign
    ]


def _problems(state: dict, lab: Lab) -> list[str]:
    out = _kernel_problems(state["kernel_errors"])
    out += [f"error output: {_ansi_free(e)[:1500]}" for e in state["error_outputs"]]
    out += [f"stderr output: {e[:1500]}" for e in state["stderr_outputs"]]
    out += [f"widget failed to display: {e[:500]}" for e in state["widget_errors"]]
    out += [f"uncaught JavaScript error: {e[:500]}" for e in lab.page_errors]
    return out


# --- the tests ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_and_every_explorer_redraws(lab, name, request):
    page = lab.page
    lab.page_errors.clear()
    kernel = page.evaluate(JS_OPEN, name)
    assert kernel == "python3", f"{name}: kernel {kernel!r}"
    try:
        t0 = time.perf_counter()
        page.evaluate(
            "() => { window.__phase = 'Run All'; window.jupyterapp.commands.execute('notebook:run-all-cells'); }"
        )
        try:
            page.wait_for_function(JS_RUN_DONE, timeout=RUN_ALL_S * 1000, polling=250)
        except Exception:
            pytest.fail(
                f"{name}: Run All did not finish within {RUN_ALL_S} s; state {lab.state()}\n{lab.log_tail()}"
            )
        run_s = time.perf_counter() - t0
        state = lab.state()
        problems = _problems(state, lab)
        assert not problems, f"{name} after Run All:\n" + "\n".join(problems)
        assert not state["pending"], f"{name}: cells not run after Run All: {state['pending']}"
        try:
            page.wait_for_function(JS_WIDGETS_RENDERED, timeout=RENDER_S * 1000, polling=250)
        except Exception:
            pytest.fail(f"{name}: widget outputs not all rendered within {RENDER_S} s")

        page.evaluate("() => { window.__phase = 'explorer changes'; }")
        found = page.evaluate(JS_EXPLORERS)
        explorers = found["explorers"]
        failures = [f"{name} cell {c}: a widget with controls but no image" for c in found["imageless"]]
        rows = []
        for i, ex in enumerate(explorers):
            call = _call_line(ex["source"])
            where = f"{name} explorer {i + 1} (cell {ex['cell']}: {call})"
            if ex["images"] != 1:
                failures.append(f"{where}: {ex['images']} images, expected one")
            controls = page.evaluate(JS_CONTROLS, i)
            row = {
                "notebook": name.removesuffix(".ipynb"),
                "index": i + 1,
                "cell": ex["cell"],
                "call": call,
                "controls": len(controls),
                "control_kinds": [f"{c['kind']} {c['label']}".strip() for c in controls],
                "src_ms": [],
                "loaded_ms": [],
                "first_ms": [],
                "changes": [],
                "run_all_s": round(run_s, 1),
            }
            if not controls:
                failures.append(f"{where}: no controls found")
            for j, c in enumerate(controls):
                what = f"{where}, control {j + 1} {c['kind']} {c['label']!r}"
                if c["kind"] == "unknown":
                    failures.append(f"{what}: not a control this test knows how to drive ({c['classes']})")
                    continue
                if c["disabled"]:
                    failures.append(f"{what}: disabled, cannot be changed")
                    continue
                actions = _actions(page, j, c["kind"])
                if not actions:
                    failures.append(f"{what}: has no other value to change to")
                for k, (action, do) in enumerate(actions):
                    r = _timed_change(page, c["kind"], do)
                    row["changes"].append(
                        {"control": j + 1, "kind": c["kind"], "label": c["label"], "action": action, **r}
                    )
                    if not r["changed"]:
                        failures.append(f"{what}: {action} did not change the image within {CHANGE_S} s")
                        continue
                    if r["src_ms"] is not None:
                        row["src_ms"].append(round(r["src_ms"], 1))
                        if k == 0:  # the first move of a control: a value not drawn before
                            row["first_ms"].append(round(r["src_ms"], 1))
                    if r["loaded_ms"] is not None:
                        row["loaded_ms"].append(round(r["loaded_ms"], 1))
            rows.append(row)
        request.config._attnlab_browser_timings = getattr(request.config, "_attnlab_browser_timings", [])
        request.config._attnlab_browser_timings.extend(rows)
        if lab.console_errors:  # reported, not failed on: JupyterLab logs some of its own
            print(f"{name}: browser console errors:", *lab.console_errors[:20], sep="\n  ")
            lab.console_errors.clear()

        state = lab.state()
        problems = _problems(state, lab)
        assert not failures and not problems, f"{name}:\n" + "\n".join(failures + problems)
    finally:
        page.evaluate(JS_CLOSE)


def test_no_notebook_was_written(lab):
    """The run touched neither the repository's notebooks nor (autosave off) the served copies."""
    assert _digest(NOTEBOOK_DIR.glob("*.ipynb")) == lab.repo_digest, "a repository notebook changed"
    assert _digest(lab.root.glob("*.ipynb")) == lab.copy_digest, (
        "JupyterLab saved a notebook copy although autosave is off in its settings"
    )
