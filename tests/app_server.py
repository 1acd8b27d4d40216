"""Start the app in-process for the API and browser tests (the model is loaded before launch)."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator


@contextmanager
def serve() -> Iterator[str]:
    """Launch the app on a free local port; yields its URL and closes it afterwards."""
    import torch

    import app

    threads = torch.get_num_threads()
    app.configure_engine()  # as `python app.py` does
    demo = app.build_app()
    demo.queue(max_size=app.QUEUE_SIZE).launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True,
                                  **app.launch_options())
    try:
        yield demo.local_url
    finally:
        demo.close()
        torch.set_num_threads(threads)  # the rest of the test session keeps its own setting
