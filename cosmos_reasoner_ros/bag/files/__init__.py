"""Bag files, no rclpy: reading any recording (reader: BagReader, TopicInfo, BagMessage, decompress_message;
its storage files: storages; the types of its topics: stored_types),
choosing the topics to replay (topics: choose_topics, CameraTopics), the whole-bag check before a replay
(integrity: check_bag, verify, Integrity), foxglove CompressedVideo decoded to frames (video: VideoDecoder),
writing bags (writer: open_writer, BagWriter), the message types per ROS 2 distribution (typestore:
typestore, fresh_typestore, ensure_type), camera bags made from videos (make: make_bag, MakeOptions),
what a recording holds for `check` (overview: overview, Overview) and header stamps read from CDR bytes
(header_stamps). The modules are imported on demand (video and make need PyAV and OpenCV)."""

__all__ = [
    "header_stamps",
    "integrity",
    "make",
    "overview",
    "reader",
    "storages",
    "stored_types",
    "topics",
    "typestore",
    "video",
    "writer",
]
