"""The broker's answers on the wire: the encoder its request pipeline writes TCP answers with.

A processor answers with string extFields (what RocketMQ's response headers hold) and, for a pull
or a pop, the messages themselves as `payload` (so a Ray caller gets them without a decode); here they
become RocketMQ's binary message layout (MessageDecoder.encode), one after another in the body.
An answer without extFields carries none on the wire, as RocketMQ writes it.
"""

from __future__ import annotations

from namesrv.broker.pop.processor import PopOutcome
from namesrv.broker.processor.types import PullOutcome
from namesrv.protocol.message.codec import encode_message_ext
from namesrv.remoting.command import RemotingResponse
from namesrv.remoting.wire_command import RemotingCommand, ext_value


class BrokerWireEncoder:
    def __init__(self, broker_addr: str) -> None:
        self.broker_addr = broker_addr

    def encode(self, cmd: RemotingCommand, response: RemotingResponse) -> RemotingCommand:
        """The wire answer to request `cmd`."""
        body = response.body
        payload = response.payload
        if isinstance(payload, (PullOutcome, PopOutcome)) and payload.messages:
            body = b"".join(encode_message_ext(m, self.broker_addr) for m in payload.messages)
        ext = {k: ext_value(v) for k, v in response.ext_fields.items() if v is not None} or None
        return cmd.response(int(response.code), response.remark, ext, body)
