"""A TCP relay that holds every chunk for a fixed delay each way: a link's round trip, for
the hosts scenario (this machine's kernel has no `netem`).

    python -m bench.relay --listen 10.231.1.1:6432 --to 127.0.0.1:5432 --delay-ms 0.5

Each direction keeps its order (the same delay after each arrival). asyncio's timers wake
to the millisecond at best, so the scenario measures the round trip it got rather than
trusting `--delay-ms` (`bench/hosts.py`). Runs until killed; prints "ready" once listening.
"""

from __future__ import annotations

import argparse
import asyncio
import socket


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    loop = asyncio.get_running_loop()
    try:
        while data := await reader.read(65536):
            if delay:
                loop.call_at(loop.time() + delay, writer.write, data)
            else:
                writer.write(data)
    except ConnectionError:
        pass
    finally:
        loop.call_at(loop.time() + delay, writer.close)


def _no_delay(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


async def main(listen: str, to: str, delay: float) -> None:
    host, port = to.rsplit(":", 1)

    async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(host, int(port))
        except OSError:
            writer.close()
            return
        _no_delay(writer)
        _no_delay(up_writer)
        await asyncio.gather(_pump(reader, up_writer, delay), _pump(up_reader, writer, delay))

    address, listen_port = listen.rsplit(":", 1)
    server = await asyncio.start_server(accepted, address, int(listen_port))
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.relay")
    parser.add_argument("--listen", required=True)
    parser.add_argument("--to", required=True)
    parser.add_argument("--delay-ms", type=float, default=0.0)
    args = parser.parse_args()
    asyncio.run(main(args.listen, args.to, args.delay_ms / 1000))
