"""The examples' device: the remote device of the server at --server, or, without one, of a
CPU compute server this process starts (tw.serve) and stops when done."""
import contextlib

import tensorwire as tw


@contextlib.contextmanager
def remote_device(url=None):
    server = tw.serve(tw.Device.cpu()) if url is None else None
    try:
        device = tw.Device.remote(server.url if server else url)
        device.connect()
        print(f"device: {device}" + (", served in-process" if server else ""))
        yield device
    finally:
        if server is not None:
            server.stop()
