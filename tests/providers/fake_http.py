"""A fake REST server's lifecycle: an aiohttp app on its own loop thread, on a free loopback
port, as a context manager. The fakes (TPU, Compute Engine, metadata) only build their app."""

from __future__ import annotations

import asyncio
import threading

from aiohttp import web


class FakeHttpServer:
    """Subclasses define `_app()` (called on the server's loop) and may set `_shutdown_s`."""

    _name = "fake server"
    _shutdown_s = 60.0  # aiohttp's default wait for requests in flight at close

    def _app(self) -> web.Application:
        raise NotImplementedError

    def _before_close(self) -> None:
        """Called on the caller's thread before the server stops (wake hanging requests)."""

    def __enter__(self):
        ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, args=(ready,), daemon=True,
                                        name=self._name.replace(" ", "-"))
        self._thread.start()
        if not ready.wait(30):
            raise RuntimeError(f"{self._name} did not start within 30 s")
        return self

    def __exit__(self, *exc: object) -> None:
        self._before_close()
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
        self._loop.close()

    def _serve(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        self._runner = web.AppRunner(self._app(), shutdown_timeout=self._shutdown_s)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        ready.set()
        self._loop.run_forever()
