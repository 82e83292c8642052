"""A controller-mode master's lease (namesrv.broker.lease): sends are taken only within lease_ms of
sending the last heartbeat the controller answered, so a master cut off from the controller stops
taking writes before the controller may elect another (its heartbeat timeout is longer)."""

from __future__ import annotations

import pytest
from ray.core.generated.common_pb2 import ActorDiedErrorContext
from ray.exceptions import ActorDiedError

from actors.controller.start import CONTROLLER_PROFILES
from actors.deployment.profiles import PROFILES
from actors.namesrv.housekeeping import died_with_its_node
from namesrv.broker.config import BrokerConfig
from namesrv.broker.lease import MasterLease
from namesrv.broker.role import RoleGuard
from namesrv.common.clock import ManualClock
from namesrv.protocol.codes import ResponseCode
from namesrv.remoting.command import MQServerError
from namesrv.store.types import BrokerRole


def leased_master(clock: ManualClock, lease_ms: int = 2_500) -> tuple[RoleGuard, MasterLease]:
    g = RoleGuard(BrokerConfig(broker_role=BrokerRole.ASYNC_MASTER), 1, clock)
    g.controlled = True
    g.lease = MasterLease(lease_ms, clock)
    return g, g.lease


def refused(g: RoleGuard) -> MQServerError:
    with pytest.raises(MQServerError) as e:
        g.check_send()
    return e.value


def test_no_answered_heartbeat_no_writes() -> None:
    g, lease = leased_master(ManualClock())
    e = refused(g)
    assert e.code == ResponseCode.SERVICE_NOT_AVAILABLE and "has not heard from the controller" in str(e)
    assert lease.refused == 1 and lease.silent_ms() is None


def test_the_lease_runs_from_when_the_answered_heartbeat_was_sent() -> None:
    """A heartbeat answered late renews only from its send time: the controller heard from this broker
    no earlier than that, and its timeout runs from then."""
    clock = ManualClock()
    g, lease = leased_master(clock)
    sent = clock()
    clock.advance(2_000)  # the answer took 2 s
    lease.renewed(sent)
    g.check_send()
    clock.advance(499)
    g.check_send()  # 2,499 ms after the send
    clock.advance(1)
    e = refused(g)
    assert "2500 ms" in str(e) and lease.silent_ms() == 2_500
    lease.renewed(sent - 100)  # an older answer arriving late changes nothing
    assert not lease.valid()
    lease.renewed(clock())
    g.check_send()


def test_a_slave_refuses_as_a_slave_whatever_its_lease() -> None:
    clock = ManualClock()
    g, lease = leased_master(clock)
    lease.renewed(clock())
    g.change_role(BrokerRole.SLAVE, 2)
    e = refused(g)
    assert "messages are put to the slave" in str(e) and lease.refused == 0


def test_no_lease_is_rocketmqs_behaviour() -> None:
    g = RoleGuard(BrokerConfig(broker_role=BrokerRole.ASYNC_MASTER), 1, ManualClock())
    g.controlled = True
    g.check_send()
    with pytest.raises(ValueError, match="positive"):
        MasterLease(0, ManualClock())


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_every_profile_leases_shorter_than_its_controllers_timeout(profile: str) -> None:
    """The safety rule: the lease must run out before the controller may elect another master."""
    lease_ms = PROFILES[profile].broker.controller_master_lease_ms
    assert lease_ms is not None
    assert lease_ms < CONTROLLER_PROFILES[profile].broker_heartbeat_timeout_ms
    assert BrokerConfig().controller_master_lease_ms == PROFILES["default"].broker.controller_master_lease_ms


def _died(message: str) -> ActorDiedError:
    return ActorDiedError(ActorDiedErrorContext(error_message=message, actor_id=b"\x01" * 16, class_name="Broker"))


def test_rays_verdict_on_a_node_is_told_from_a_process_death() -> None:
    """The controller leaves an actor Ray declared dead with its node to the heartbeat timeout (it may run
    on, cut off: ray-project/ray #26405); an actor whose process ended is dead for sure."""
    assert died_with_its_node(_died("The actor died because its node has died. Node Id: 3f2a"))
    assert not died_with_its_node(_died("The actor is dead because its worker process has died. Worker exit "
                                        "type: SYSTEM_ERROR"))
    assert not died_with_its_node(ActorDiedError())
