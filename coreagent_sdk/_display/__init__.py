"""How values look in a notebook and a terminal.

Holds: the text and HTML renderers of every value (`_render`) and the call graph with its SVG
(`_callgraph`). A new notebook view goes here.

May import: every room below it (`_records`, `_peer`, `_runtime`, `_attach`, `_http`,
`_telemetry`) and the top-level base modules. Nothing below imports it at import time: the
values' `__repr__` / `_repr_html_` methods import `_render` when they run.
"""
