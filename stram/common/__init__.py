"""The base layer that master, agent and CLI share; it imports nothing above it.

``attributes``, ``errors``
    The attribute table (DAG, operator, port); the error family users see.
``fs``, ``localfs``, ``apppath``, ``space``, ``destinations``
    File access (HDFS through ``pyarrow.fs``, local disk), the names under ``APP_PATH``,
    writes that wait out a full disk, and output destinations no one else controls.
``tls``, ``secret``, ``kerberos``
    TLS contexts, secrets from private files, renewed Kerberos tickets.
``logsetup``, ``logs``, ``stacks``
    Log files and reading them; every thread's stack as data.
``windows``, ``partition``, ``imports``
    Window ids, partition hashing, ``"module:attr"`` loading.
``apps``, ``liveness``, ``hadoopconf``, ``skeinkeys``, ``jsonbytes``
    The local application registry, process liveness, the client's Hadoop configuration,
    the Skein names client and master share, exact JSON from bytes.
"""
