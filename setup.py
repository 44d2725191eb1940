"""pip install for tools that need the Python package without a ROS workspace (parsing, bags, the server).

colcon builds the ROS package from CMakeLists.txt (it generates the messages); this file is not used there.
"""

from setuptools import find_packages, setup

setup(
    name="cosmos_reasoner_ros",
    version="0.1.0",
    description="ROS 2 node asking NVIDIA's Cosmos 3 Reasoner about camera clips",
    license="Apache-2.0",
    packages=find_packages(include=["cosmos_reasoner_ros", "cosmos_reasoner_ros.*"]),
    package_data={"cosmos_reasoner_ros": ["data/*"]},
    data_files=[
        ("share/ament_index/resource_index/packages", ["resource/cosmos_reasoner_ros"]),
        ("share/cosmos_reasoner_ros", ["package.xml"]),
        (
            "share/cosmos_reasoner_ros/config",
            ["config/reasoner.yaml", "config/server.yaml", "config/tasks.yaml", "config/fastdds_shm.xml"],
        ),
        ("share/cosmos_reasoner_ros/launch", ["launch/reasoner.launch.py"]),
    ],
    python_requires=">=3.10",
    install_requires=[
        "numpy>=1.21",
        "opencv-python-headless>=4.5",
        "openai>=1.40",
        "PyYAML>=5.4",
        "rosbags>=0.10",
        "rosbags-image>=0.9",
    ],
    extras_require={"h264": ["av>=12"], "report": ["matplotlib>=3.5", "tqdm>=4.60"]},
    entry_points={
        "console_scripts": [
            "reasoner_node = cosmos_reasoner_ros.node:main",
            "cosmos-reasoner-server = cosmos_reasoner_ros.server.cli:main",
            "cosmos-reasoner-parse = cosmos_reasoner_ros.parse_cli:main",
            "cosmos-reasoner-bag = cosmos_reasoner_ros.bag.cli:main",
        ]
    },
)
