"""Comfy's API v2 (`/api/v2/*`) served natively, on this server's own queue, history, hub and
asset catalogue (no comfy-api-proxy in front). The routes are web/routes_v2.py; this package
holds what they share:

  store.py    the v2 bookkeeping the queue and history do not keep (idempotency keys, the format
              a job was submitted in, its labels, pending jobs cancelled through v2, output ids)
  bridge.py   a hub client that turns the executor's WebSocket messages into per-job live state
              (progress snapshots) and server-sent events
  assets.py   v2 assets over web/assets.py's catalogue (whether or not --enable-assets is on),
              `core/ASSET` references and job outputs as assets
  shapes.py   the v2 wire shapes: the error envelope, times, jobs, outputs, assets, labels

The shapes were learnt from the `comfy-sdk` 0.5.0 client (comfy_low/models/_generated.py,
transport.py, jobs.py) and the `comfy-api-proxy` 0.1.6 server (app.py, realtime.py); see
docs/api-v2.md for what is served and where it differs from the proxy.
"""
