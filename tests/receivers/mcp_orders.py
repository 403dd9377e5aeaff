"""A tenant's MCP server, built on the official Python SDK (`mcp` on PyPI), for the MCP tool tests.

Usage: python mcp_orders.py TOKEN

Serves the Streamable HTTP transport at /mcp on 127.0.0.1, on a port the system picks, and prints
that port as stdout's first line. Every request must carry `Authorization: Bearer TOKEN`, else it
is answered 401. Its tools, whose schemas Pydantic writes (with `$defs`/`$ref` and `anyOf`):

- `lookup_order(order: {id, channel?})`: an order's status (a structured result);
- `cancel_order(order_id)`: always fails (the tool's own error, `isError`);
- `slow_lookup(order_id)`: answers after 30 seconds.

Each call of a tool is printed as one JSON line on stdout (its name, its arguments) before it is
answered. `/broken` answers every request with JSON that is not JSON-RPC, for a server that breaks
the protocol. Runs until it is killed.
"""

import asyncio
import json
import socket
import sys
from typing import Literal

import uvicorn
from pydantic import BaseModel, Field

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError


class OrderRef(BaseModel):
    id: str = Field(pattern=r"^[0-9]{4}$", description="The order number, four digits")
    channel: Literal["web", "phone"] | None = None


class OrderStatus(BaseModel):
    status: str
    order: str


def seen(tool: str, arguments: dict) -> None:
    print(json.dumps({"tool": tool, "arguments": arguments}), flush=True)


server = MCPServer("orders")


@server.tool()
def lookup_order(order: OrderRef) -> OrderStatus:
    """Finds an order's status."""
    seen("lookup_order", {"order": order.model_dump(exclude_none=True)})
    return OrderStatus(status="shipped", order=order.id)


@server.tool()
def cancel_order(order_id: str) -> str:
    """Cancels an order."""
    seen("cancel_order", {"order_id": order_id})
    raise ToolError("an order that shipped cannot be cancelled")


@server.tool()
async def slow_lookup(order_id: str) -> str:
    """Finds an order's status, slowly."""
    seen("slow_lookup", {"order_id": order_id})
    await asyncio.sleep(30)
    return "late"


def main() -> None:
    token = sys.argv[1]
    mcp_app = server.streamable_http_app()

    async def app(scope, receive, send):
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            if scope["path"].startswith("/broken"):
                await answer(send, 200, b'{"not": "json-rpc"}')
                return
            if headers.get(b"authorization") != f"Bearer {token}".encode():
                await answer(send, 401, b'{"error": "unauthorized"}')
                return
        await mcp_app(scope, receive, send)

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    print(sock.getsockname()[1], flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on")).run(sockets=[sock])


async def answer(send, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


if __name__ == "__main__":
    main()
