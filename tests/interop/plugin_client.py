"""A stock python-socketio client speaking an Agentix plugin namespace.

Usage: plugin_client.py ADDR TOKEN
Joins /e2e-plugin with the sandbox token, emits `configure`, waits for the
sandbox's `configured` event and prints its data as JSON.
"""

import asyncio
import json
import sys

import socketio


async def main(addr: str, token: str) -> None:
    sio = socketio.AsyncClient()
    got = asyncio.get_running_loop().create_future()

    @sio.on("configured", namespace="/e2e-plugin")
    async def on_configured(data):
        if not got.done():
            got.set_result(data)

    await sio.connect(
        f"http://{addr}",
        namespaces=["/e2e-plugin"],
        auth={"token": token},
        headers={"Authorization": f"Bearer {token}"},
        transports=["websocket"],
    )
    await sio.emit("configure", {"from": "python", "n": 42}, namespace="/e2e-plugin")
    data = await asyncio.wait_for(got, timeout=20)
    print(json.dumps(data, sort_keys=True))
    await sio.disconnect()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
