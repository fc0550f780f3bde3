"""Starting and stopping containers.

``local``
    The :class:`~.local.Launcher` interface and local container processes.
``yarn``
    Containers as Skein service instances inside a YARN application.
``yarnnode``
    What runs on a YARN node before stram does (``python -m stram.master.launch.yarnnode``):
    HDFS checks, staging the spec, the application id.
"""
