"""Which subscriptions this broker can serve, as RocketMQ decides it: TAG subscriptions always;
SQL92 ones (property filters) only with `enable_property_filter` (RocketMQ's enablePropertyFilter,
off by default) and a valid expression.

- CHECK_CLIENT_CONFIG (ClientManageProcessor.checkClientConfig), which a Java consumer sends at
  start for each non-TAG subscription: SYSTEM_ERROR "The broker does not support consumer to
  filter message by SQL92" when the filter is off, SUBSCRIPTION_PARSE_FAILED with the reason for an
  expression that does not compile.
- HEART_BEAT registers the subscription either way (RocketMQ does not refuse a heartbeat: it also
  carries the client's producers and other groups); the broker logs why it cannot serve it.
- PULL_MESSAGE (PullMessageProcessor) refuses a subscription it cannot serve: SYSTEM_ERROR with the
  same remark when the filter is off; SUBSCRIPTION_PARSE_FAILED for a bad expression in the pull's
  header, FILTER_DATA_NOT_EXIST for a bad one registered by heartbeat.
"""

from __future__ import annotations

import logging

from namesrv.broker.client.consumer_manager import ConsumerManager, SubscriptionData
from namesrv.filter import is_tag_type
from namesrv.protocol import fastjson
from namesrv.protocol.codes import ResponseCode
from namesrv.remoting.command import MQServerError

log = logging.getLogger(__name__)

FILTER_DATA_NOT_EXIST_REMARK = "The broker's consumer filter data is not exist!Your expression may be wrong!"


def unsupported_remark(expression_type: str) -> str:
    return f"The broker does not support consumer to filter message by {expression_type}"


def check_client_config(body: bytes | None, enabled: bool) -> tuple[int, str | None]:
    """CHECK_CLIENT_CONFIG's answer (code, remark) for a CheckClientRequestBody
    {"clientId", "group", "subscriptionData": {...}}; no body or no subscription: nothing to refuse."""
    if not body:
        return ResponseCode.SUCCESS, None
    try:
        data = fastjson.loads(body)
    except fastjson.JsonError as e:
        return ResponseCode.SYSTEM_ERROR, f"check client config body: {e}"
    wire = data.get("subscriptionData") if isinstance(data, dict) else None
    if not isinstance(wire, dict):
        return ResponseCode.SUCCESS, None
    sub = SubscriptionData.from_wire(wire)
    if is_tag_type(sub.expression_type):
        return ResponseCode.SUCCESS, None
    if not enabled:
        return ResponseCode.SYSTEM_ERROR, unsupported_remark(sub.expression_type)
    if sub.sql is None:
        log.warning("client %s@%s filters by %s but its expression does not compile: %s",
                    data.get("clientId"), data.get("group"), sub.expression_type, sub.filter_error)
        return ResponseCode.SUBSCRIPTION_PARSE_FAILED, sub.filter_error
    return ResponseCode.SUCCESS, None


def note_unservable(consumers: ConsumerManager, group: str, subs: list[SubscriptionData], enabled: bool) -> None:
    """Log, once per new or changed subscription, a heartbeat's subscription this broker will refuse to serve."""
    for sub in subs:
        if is_tag_type(sub.expression_type):
            continue
        before = consumers.subscription(group, sub.topic)
        if before is not None and (before.sub_string, before.expression_type) == (sub.sub_string,
                                                                                    sub.expression_type):
            continue
        if not enabled:
            log.warning("consumer group %s subscribes to %s by %s, but enable_property_filter is off: its pulls "
                        "will be refused", group, sub.topic, sub.expression_type)
        elif sub.sql is None:
            log.warning("consumer group %s subscribes to %s with an expression that does not compile: %s",
                        group, sub.topic, sub.filter_error)


def pull_subscription(topic: str, subscription: str | None, expression_type: str | None,
                      stored: SubscriptionData | None, enabled: bool) -> SubscriptionData | None:
    """The subscription a pull filters by: the one in its header, else the one its group registered
    by heartbeat (None: every message). Raises MQServerError for one this broker cannot serve."""
    from_header = subscription is not None
    if subscription is not None:
        if is_tag_type(expression_type) and subscription.strip() in ("", "*"):
            return None
        sub: SubscriptionData | None = SubscriptionData.build(topic, subscription, expression_type)
    else:
        sub = stored
    if sub is None or is_tag_type(sub.expression_type):
        return sub
    if not enabled:
        raise MQServerError(ResponseCode.SYSTEM_ERROR, unsupported_remark(sub.expression_type))
    if sub.sql is None:
        if from_header:
            raise MQServerError(ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                                f"parse the consumer's subscription failed: {sub.filter_error}")
        raise MQServerError(ResponseCode.FILTER_DATA_NOT_EXIST, FILTER_DATA_NOT_EXIST_REMARK)
    return sub
