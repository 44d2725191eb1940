"""request_intake: a trigger's requests get the node's defaults, the standing instruction and unique ids; a
request that cannot run is failed through the scheduler (one outcome, a reason in the reply); pre-encoding
follows the triggers. Without ROS."""

from __future__ import annotations

import threading
import time

from support.configs import default_config
from support.processes import wait_until

from cosmos_reasoner_ros.node.intake import RequestIntake
from cosmos_reasoner_ros.node.parameters import NodeConfig
from cosmos_reasoner_ros.reasoner.tasks import TaskCatalog
from cosmos_reasoner_ros.requests.groups import GroupSettings
from cosmos_reasoner_ros.requests.outcome import Outcome
from cosmos_reasoner_ros.requests.scheduler import Job, RequestScheduler

NOW_NS = 1_700_000_000_000_000_000


class Recorder:
    """A scheduler whose requests succeed at once; every delivered outcome recorded."""

    def __init__(self) -> None:
        self.delivered: list[Outcome] = []
        self.lock = threading.Lock()
        self.scheduler = RequestScheduler(self.execute, self.deliver)

    @staticmethod
    def execute(job: Job, _report: object) -> tuple[Outcome, ...]:
        return tuple(Outcome(s.request_id, s.task, s.instruction, True, answer="ok") for s in job.specs)

    def deliver(self, _job: Job, outcome: Outcome) -> None:
        with self.lock:
            self.delivered.append(outcome)


def intake(cfg: NodeConfig, recorder: Recorder) -> RequestIntake:
    return RequestIntake(cfg, TaskCatalog.load(), lambda: recorder.scheduler, lambda: NOW_NS, "robot")


def test_trigger_requests_take_the_trigger_settings_one_clip_and_unique_ids() -> None:
    cfg = default_config(
        task="trajectory",
        trigger_tasks="next_action, trajectory",
        trigger_deadline_s=3.0,
        trigger_reasoning=False,
    )
    rec = Recorder()
    group = intake(cfg, rec).trigger_group()
    assert [s.task for s in group.specs] == ["next_action", "trajectory"]
    assert all(s.deadline_s == 3.0 and not s.reasoning and s.trigger_ns == NOW_NS for s in group.specs)
    assert len({s.clip_key for s in group.specs}) == 1  # one clip for both questions
    ids = [s.request_id for g in (group, intake(cfg, rec).trigger_group()) for s in g.specs]
    assert len(set(ids)) == 4 and all(i.startswith("robot-") for i in ids)
    assert rec.scheduler.shutdown(1.0)


def test_a_refused_instruction_keeps_the_old_one() -> None:
    cfg = default_config(task="trajectory", instruction="pick up the cup", max_instruction_chars=40)
    rec = Recorder()
    desk = intake(cfg, rec)
    assert desk.new_group().specs[0].instruction == "pick up the cup"
    assert "characters" in desk.set_instruction("x" * 41)
    assert desk.instruction == desk.new_group().specs[0].instruction == "pick up the cup"
    assert desk.set_instruction("open the drawer") == ""
    assert desk.new_group().specs[0].instruction == "open the drawer"
    assert (
        desk.new_group(settings=GroupSettings(instruction="wipe the table")).specs[0].instruction
        == "wipe the table"
    )  # a goal's own
    assert rec.scheduler.shutdown(1.0)


def test_a_request_that_cannot_run_gets_its_reason_and_one_result() -> None:
    rec = Recorder()
    desk = intake(default_config(), rec)
    job, refused = desk.submit(desk.new_group(settings=GroupSettings(cameras=("no_such_camera",))))
    assert "no_such_camera" in refused
    wait_until(lambda: rec.delivered, 5, "the refusal's outcome")
    job_ok, accepted = desk.submit(desk.new_group())
    assert accepted == ""
    wait_until(lambda: len(rec.delivered) == 2, 5, "the accepted request's outcome")
    kinds = {o.request_id: (o.success, o.error_kind) for o in rec.delivered}
    assert kinds == {job.spec.request_id: (False, "invalid_request"), job_ok.spec.request_id: (True, "")}
    assert rec.scheduler.shutdown(1.0)


def test_frames_are_pre_encoded_while_triggers_come() -> None:
    rec = Recorder()
    quiet = intake(default_config(pre_encode="auto", trigger_period_s=0.0, buffer_seconds=3.0), rec)
    assert not quiet.pre_encoding()  # nobody asks: no encoding ahead
    quiet.submit(quiet.new_group())
    assert quiet.pre_encoding()  # a trigger came: the next clip is likely soon (a stall here is under 3 s)
    time.sleep(3.2)
    assert not quiet.pre_encoding()  # a buffer's length later without one
    assert intake(default_config(pre_encode="on", trigger_period_s=0.0), rec).pre_encoding()
    assert intake(default_config(pre_encode="auto", trigger_period_s=1.0), rec).pre_encoding()
    assert rec.scheduler.shutdown(1.0)


def test_a_goal_too_large_is_one_refused_request_built_from_bounded_prefixes() -> None:
    """A goal of 100,000 tasks (or names, instructions, cameras of a megabyte) is refused before anything
    is made of it: one request, one outcome, an error that quotes at most a bounded prefix."""
    rec = Recorder()
    desk = intake(default_config(max_instruction_chars=2000), rec)
    cases: dict[str, tuple[tuple[str, ...], GroupSettings]] = {
        "tasks": (("next_action",) * 100_000, GroupSettings()),
        "task name": (("n" * 1_000_000,), GroupSettings()),
        "instructions": (("custom", "custom"), GroupSettings(instructions=("x",) * 100_000)),
        "cameras": ((), GroupSettings(cameras=("front",) * 100_000)),
        "camera name": ((), GroupSettings(cameras=("c" * 1_000_000,))),
        "step": (("assisted_next_action",), GroupSettings(step="s" * 1_000_000)),
    }
    for what, (tasks, settings) in cases.items():
        group = desk.new_group(tasks, settings)
        assert len(group.specs) == 1 and group.problem, what
        assert len(group.problem) < 300 and "00000" in group.problem, (what, group.problem[:300])
        assert len(group.specs[0].task) <= 128 and len(group.specs[0].instruction) <= 2000, what
        _job, refused = desk.submit(group)
        assert refused == group.problem
    wait_until(lambda: len(rec.delivered) == len(cases), 10, "one outcome per refused goal")
    assert all(o.error_kind == "invalid_request" and len(o.error) < 300 for o in rec.delivered)
    assert rec.scheduler.shutdown(1.0)


def test_an_unknown_task_of_a_megabyte_is_quoted_by_a_bounded_prefix() -> None:
    rec = Recorder()
    desk = intake(default_config(), rec)
    _job, refused = desk.submit(desk.new_group(tasks=("f" * 100,)))  # long, but within the name limit
    assert "unknown task 'ffff" in refused and "(100 characters)" in refused and len(refused) < 400
    assert rec.scheduler.shutdown(1.0)


def _cdr_string(data: bytes, little: bool = True) -> bytes:
    order = "little" if little else "big"
    return bytes([0, 1 if little else 0, 0, 0]) + (len(data) + 1).to_bytes(4, order) + data + b"\0"


def test_an_instruction_is_read_whole_from_its_bytes_and_a_nul_refused() -> None:
    """rclpy hands a std_msgs/String over up to its first NUL: 'open\\0 the drawer' ran as 'open'."""
    from rclpy.serialization import serialize_message
    from std_msgs.msg import String

    from cosmos_reasoner_ros.node.intake import instruction_from_cdr

    text = "pick up the cup ü"
    assert instruction_from_cdr(serialize_message(String(data=text))) == (text, "")
    text, problem = instruction_from_cdr(_cdr_string(b"open\0 the drawer"))
    assert "NUL" in instruction_problem_of(text, problem)
    assert instruction_from_cdr(_cdr_string(b"put it down", little=False)) == ("put it down", "")
    assert instruction_from_cdr(_cdr_string(b"\xff\xfe"))[1] == "it is not valid UTF-8"
    assert instruction_from_cdr(b"\0\1\0\0\x09\0\0\0short")[1] == "not a serialized std_msgs/String"
    rec = Recorder()
    desk = intake(default_config(instruction="keep this"), rec)
    assert "NUL" in desk.set_instruction(*instruction_from_cdr(_cdr_string(b"open\0 the drawer")))
    assert desk.instruction == "keep this"
    assert rec.scheduler.shutdown(1.0)


def instruction_problem_of(text: str, problem: str) -> str:
    from cosmos_reasoner_ros.requests import instruction_problem

    return problem or instruction_problem(text, 2000)
