"""Drives `bub mcp serve` with the official MCP Python SDK's stdio client.

Usage: tapes.py BUB HOME SEARCH_WORD TAPE_WITH_ANCHOR

Spawns `BUB mcp serve` with BUB_HOME=HOME (and every log on, which must all
go to stderr), then lists the tools and the tapes, pages the tape list,
searches every tape for SEARCH_WORD, reads TAPE_WITH_ANCHOR from its last
anchor and from its first entry, and makes the calls that must fail. Prints
one JSON object with what the server answered (tests/it/mcp_serve.rs asserts
on it). A line on the server's stdout that is not the protocol reaches the
session as an exception, recorded in `stream_errors`.
"""

import json
import sys

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def result(answer):
    """A tool result as plain JSON: its text, its structured content, whether it is an error."""
    texts = [block.text for block in answer.content if getattr(block, "type", None) == "text"]
    return {"text": "\n".join(texts), "structured": answer.structured_content, "is_error": answer.is_error}


async def main(bub, home, word, anchored):
    stream_errors = []

    async def on_message(message):
        if isinstance(message, Exception):
            stream_errors.append(repr(message))

    server = StdioServerParameters(command=bub, args=["mcp", "serve"], env={"BUB_HOME": home, "BUB_LOG": "debug"})
    seen = {}
    with anyio.fail_after(60):
        async with stdio_client(server) as (read, write):
            async with ClientSession(read, write, message_handler=on_message) as session:
                init = await session.initialize()
                seen["server"] = {"name": init.server_info.name, "version": init.server_info.version}
                seen["instructions"] = init.instructions
                tools = await session.list_tools()
                seen["tools"] = [
                    {
                        "name": tool.name,
                        "read_only": tool.annotations.read_only_hint if tool.annotations else None,
                        "input": tool.input_schema,
                        "has_output_schema": tool.output_schema is not None,
                    }
                    for tool in tools.tools
                ]
                call = session.call_tool
                seen["list"] = result(await call("tapes_list", {}))
                first = result(await call("tapes_list", {"limit": 1}))
                second = result(await call("tapes_list", {"limit": 1, "cursor": first["structured"]["next_cursor"]}))
                seen["pages"] = [first, second]
                seen["search"] = result(await call("tape_search", {"query": word}))
                seen["search_in_other_tape"] = result(await call("tape_search", {"query": word, "tape": anchored}))
                seen["read"] = result(await call("tape_read", {"tape": anchored}))
                seen["read_whole"] = result(await call("tape_read", {"tape": anchored, "from_id": 1, "max_chars": 40}))
                seen["read_paged"] = result(await call("tape_read", {"tape": anchored, "from_id": 1, "limit": 2}))
                cursor = seen["read_paged"]["structured"]["next_cursor"]
                seen["read_next_page"] = result(await call("tape_read", {"tape": anchored, "cursor": cursor, "limit": 2}))
                seen["errors"] = {
                    "unknown_tape": result(await call("tape_read", {"tape": "no-such-tape"})),
                    "unknown_anchor": result(await call("tape_read", {"tape": anchored, "anchor": "no/such"})),
                    "limit_zero": result(await call("tapes_list", {"limit": 0})),
                    "limit_huge": result(await call("tape_search", {"query": word, "limit": 10**12})),
                    "bad_argument": result(await call("tape_read", {"tape": anchored, "limit": "many"})),
                    "unknown_argument": result(await call("tapes_list", {"write": True})),
                    "bad_cursor": result(await call("tapes_list", {"cursor": "forged"})),
                }
                try:
                    await call("tape_write", {"tape": anchored})
                    seen["unknown_tool"] = "answered"
                except Exception as error:  # the SDK raises on a JSON-RPC error
                    seen["unknown_tool"] = str(error)
                # Still serving after all of the above.
                seen["after_errors"] = result(await call("tapes_list", {}))
    seen["stream_errors"] = stream_errors
    print(json.dumps(seen))


if __name__ == "__main__":
    anyio.run(main, *sys.argv[1:5])
