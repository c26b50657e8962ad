import inspect

import pytest

from attnlab.course.source import function_source


def test_function_source_is_inspects_source_with_decorators():
    from attnlab.core import attention

    assert function_source("core.attention", "fa2_head") + "\n" == inspect.getsource(attention.fa2_head)
    text = function_source("kernels.gluon_fa3_kernel", "_producer", "_pingpong")
    assert text.startswith("@gluon.jit\ndef _producer(") and "\n\n\n@gluon.jit\ndef _pingpong(" in text
    assert text.count("def ") == 2


@pytest.mark.parametrize(
    "module, names, match",
    [
        ("kernels.gluon_fa3_kernel", ("no_such",), "has no top-level function 'no_such'"),
        ("kernels.nowhere", ("x",), "no file"),
        ("../etc", ("x",), "dotted attnlab module"),
        ("fmt", (), "at least one"),
    ],
)
def test_function_source_refuses_by_name(module, names, match):
    with pytest.raises(ValueError, match=match):
        function_source(module, *names)
