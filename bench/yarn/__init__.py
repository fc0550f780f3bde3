"""stram on YARN.

* :mod:`.bench_yarn`: submit -> first processed window, and recovery after a container kill on
  YARN beside the local launcher (run it; starts the mini cluster without HADOOP_CONF_DIR).
"""
