"""The aiohttp server: routes, WebSocket hub, queue worker, history store, static frontend."""
