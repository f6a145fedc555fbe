"""What happened: the records of calls and turns, and the tables made of them.

Holds: the call log and its records (`_calllog`), delegation trees (`_calltree`) and their
spans (`_tree_spans`), the steps of a turn (`_steps`), token usage (`_usage`) and prices
(`_pricing`), and the DataFrames of all of them (`_frames`). A new record column goes here.

May import: `_peer`, `_runtime`, `_attach`, `_http`, `_telemetry` and the top-level base
modules. Never `_display`: a record's `__repr__` / `_repr_html_` imports its renderer when it
runs.
"""
