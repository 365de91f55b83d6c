"""A stock python-socketio client on /rpc, /log and /trace.

Usage: side_channel_client.py ADDR TOKEN N
Joins /rpc, /log and /trace with the sandbox token on one connection, calls
`agentix_e2e::chatter(N, 0, N)` with its arguments as a CBOR binary
attachment, decodes the CBOR result, and reads `records` and `events`
batches (CBOR arrays in binary attachments, acknowledged one by one) until
the call's N log records and N span ends have arrived. Prints a JSON
summary of what it decoded.
"""

import asyncio
import json
import sys

import cbor2
import socketio


def joined(attachment):
    """Bytes past 1 MiB arrive as a list of parts."""
    return b"".join(attachment) if isinstance(attachment, list) else attachment


async def main(addr: str, token: str, n: int) -> None:
    sio = socketio.AsyncClient()
    loop = asyncio.get_running_loop()
    result = loop.create_future()
    done = asyncio.Event()
    messages = []
    spans = []

    def check() -> None:
        if len(messages) >= n and len(spans) >= n:
            done.set()

    @sio.on("call:result", namespace="/rpc")
    async def on_result(data):
        result.set_result(cbor2.loads(joined(data["value"])))

    @sio.on("call:error", namespace="/rpc")
    async def on_error(data):
        result.set_exception(RuntimeError(json.dumps(data["error"])))

    @sio.on("records", namespace="/log")
    async def on_records(data):
        for record in cbor2.loads(joined(data["cbor"])):
            if record["target"] == "agentix_e2e":
                messages.append({"message": record["message"], "level": record["level"],
                                 "seq": record.get("fields", {}).get("seq")})
        await sio.emit("ack", {}, namespace="/log")
        check()

    @sio.on("events", namespace="/trace")
    async def on_events(data):
        for event in cbor2.loads(joined(data["cbor"])):
            if event["kind"] == "span_end" and event["data"]["name"] == "burst.span":
                spans.append(event["data"]["attributes"]["seq"])
        await sio.emit("ack", {}, namespace="/trace")
        check()

    await sio.connect(
        f"http://{addr}",
        namespaces=["/rpc", "/log", "/trace"],
        auth={"token": token},
        headers={"Authorization": f"Bearer {token}"},
        transports=["websocket"],
    )
    args = cbor2.dumps([n, 0, n])
    await sio.emit("call", {"id": 1, "target": "agentix_e2e::chatter", "args": args},
                   namespace="/rpc")
    value = await asyncio.wait_for(result, timeout=30)
    await asyncio.wait_for(done.wait(), timeout=30)
    print(json.dumps({"result": value, "records": messages, "spans": spans}, sort_keys=True))
    await sio.disconnect()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
