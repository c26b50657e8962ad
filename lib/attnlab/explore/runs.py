"""The name notebooks 03-06 import (`from attnlab.explore import runs`,
`from attnlab.explore.runs import newest_run`) for attnlab.explore.measured, the one reader of run
files and its views; see that package."""
from attnlab.explore.measured import *  # noqa: F401,F403
from attnlab.explore.measured import __all__  # noqa: F401
