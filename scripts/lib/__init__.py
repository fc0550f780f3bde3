"""The Python behind the commands in scripts/: ./scripts/minicluster (minicluster.py) and ./scripts/kafka (kafka.py).

Each command file in scripts/ only runs its module's ``main``; what the two
share (Java, fetching jars with Maven, the JVM's process) is jvm.py. A package,
so that a command finds it as ``lib`` (its own folder, scripts/, is first on
sys.path when it runs) and the modules import each other relatively.
"""
