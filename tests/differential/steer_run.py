"""`bub run MESSAGE` with steering messages already waiting in the scope's
inbox for the session (the differential scenario "steering messages
pending"), and with the media items of BUBDIFF_MEDIA (a JSON list of
{type, mime_type, url}) on the inbound; prints the outbounds as `bub run`
does. Python Bub 0.6.0a3 side."""
import asyncio
import json
import os
import sys

from bub.channels.message import ChannelMessage, MediaItem
from bub.framework import BubFramework


async def main(message, steered):
    framework = BubFramework()
    framework.load_hooks()
    session = "cli:local"
    inbound = ChannelMessage(session_id=session, content=message, channel="cli", chat_id="local",
                             context={"sender_id": "human"},
                             media=[MediaItem(**m) for m in json.loads(os.environ.get("BUBDIFF_MEDIA", "[]"))])
    async with framework.running():
        for text in steered:
            note = ChannelMessage(session_id=session, content=text, channel="cli", chat_id="local",
                                  context={"sender_id": "human"})
            assert await framework.steer_message(message=note, session_id=session, state={})
        result = await framework.process_inbound(inbound)
    for outbound in result.outbounds:
        content = outbound.get("content", "") if isinstance(outbound, dict) else getattr(outbound, "content", "")
        print(f"[cli:local]\n{content}")


asyncio.run(main(sys.argv[1], sys.argv[2:]))
