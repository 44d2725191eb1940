"""Start the Cosmos 3 Reasoner: the supervised vLLM server (start_server:=true) and reasoner_node.

  ros2 launch cosmos_reasoner_ros reasoner.launch.py model:=nvidia/Cosmos3-Nano gpus:=0
  ros2 launch cosmos_reasoner_ros reasoner.launch.py start_server:=false server_url:=http://gpu-host:8000/v1
  ros2 launch cosmos_reasoner_ros reasoner.launch.py lifecycle:=true   # a managed node (lifecycle manager)
  ros2 launch cosmos_reasoner_ros reasoner.launch.py handoff:=follow_path camera_height_m:=0.4 \
      camera_pitch_deg:=15 controller_id:=FollowPath   # paths to Nav2's controller server (README)
A server started here tells the node what it serves (launch_config.server_facts): mode edge gives
model_family edge, a profile with --limit-mm-per-prompt '{"image": N, "video": 0}' gives media_form frames.
Arguments and their resolution live in cosmos_reasoner_ros/launch_config.py (tested without launch).
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, ExecuteProcess, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode, Node

from cosmos_reasoner_ros import launch_config

NODE_ACTIONS = {"node": Node, "lifecycle_node": LifecycleNode}  # launch_config decides which


def _processes(context, *args, **kwargs):
    plan = launch_config.plan(
        {name: LaunchConfiguration(name).perform(context) for name in launch_config.ARGUMENT_NAMES}
    )
    actions = []
    if plan.supervisor is not None:
        actions.append(
            ExecuteProcess(
                cmd=list(plan.supervisor.cmd),
                name=plan.supervisor.name,
                output="screen",
                sigterm_timeout=str(plan.supervisor.sigterm_timeout_s),
            )
        )
    actions.append(
        NODE_ACTIONS[plan.node.action](
            package=plan.node.package,
            executable=plan.node.executable,
            name=plan.node.name,
            namespace="",
            parameters=plan.node.parameters,
            output="screen",
            sigterm_timeout=str(plan.node.sigterm_timeout_s),
        )
    )
    return actions


def generate_launch_description():
    return LaunchDescription(
        [
            DeclareLaunchArgument(a.name, default_value=a.default, description=a.description)
            for a in launch_config.ARGUMENTS
        ]
        + [OpaqueFunction(function=_processes)]
    )
