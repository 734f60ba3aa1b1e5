"""Helper processes of the gateway exit when it is gone, even when it was killed."""

from __future__ import annotations

import os
import threading
import time


def exit_with_parent(parent: int) -> None:
    """In a worker process: exit as soon as ``parent`` (the gateway) is gone."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()
