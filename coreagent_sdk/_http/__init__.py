"""The HTTP layer every client of the SDK stands on.

Holds: the network transport and its connection pool (`_network`, with `_requests` and
`_request_bytes`, which build and write a request), the in-process transports (`_transport`:
ASGI, routing by host), bounded and decompressed reads (`_inflate`), the shared client and
status-error plumbing (`_plumbing`), the endpoint policy checked before any dial (`_endpoint`,
`_hosts`), rate-limit answers (`_rate_limit`), one wall-clock deadline per call (`_deadline`),
and the "needs asyncio" guard (`_asyncio_only`).

May import: the top-level base modules (`errors`, `_scrub`, `_clock`, `_traceback`,
`_version`, `jupyter`) and httpx. Nothing of the attach protocol: a new HTTP option goes here.
"""
