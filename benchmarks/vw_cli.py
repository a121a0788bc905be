#!/usr/bin/env python3
"""A `vw` command on top of the vowpalwabbit package from PyPI, which ships the
library and Python bindings but no command-line binary. Arguments are those of
the vw command line; the parser and learner run exactly as under the binary
(Workspace.run_parser drives VW's own driver loop)."""
import sys

from vowpalwabbit import Workspace

ws = Workspace(arg_list=sys.argv[1:])
ws.run_parser()
ws.finish()
