"""ComfyUI's `app` package (its server application) for node packs: only `app.logger` is here,
over our server's log store (compat/app_logger.py); the server itself is web/."""
