package stram;

import java.io.File;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.io.PrintWriter;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.StandardCopyOption;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.Arrays;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hdfs.HdfsConfiguration;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import org.apache.hadoop.minikdc.MiniKdc;
import org.apache.hadoop.security.UserGroupInformation;
import org.apache.hadoop.yarn.api.records.NodeId;
import org.apache.hadoop.yarn.api.records.NodeState;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.MiniYARNCluster;
import org.apache.hadoop.yarn.server.resourcemanager.RMContext;
import org.apache.hadoop.yarn.server.resourcemanager.rmnode.RMNode;

import sun.misc.Signal;

/**
 * stram's mini Hadoop cluster: a NameNode + DataNode (MiniDFSCluster) and a
 * ResourceManager + NodeManager (MiniYARNCluster) in this one JVM, as the
 * current user, on free loopback ports.
 *
 * <pre>java stram.MiniCluster CONF_DIR WORK_DIR NM_MEMORY_MB NM_VCORES APP_CLASSPATH [NODES TOPOLOGY_TABLE]</pre>
 *
 * With NODES (more than 1) the cluster is one of several nodes: two DataNodes
 * and the ResourceManager alone (work-preserving recovery, a LevelDB state store
 * under WORK_DIR, a short NodeManager liveness expiry, racks from the
 * TableMapping file TOPOLOGY_TABLE); ./scripts/minicluster starts the NODES
 * NodeManagers as processes of their own once CONF_DIR/cluster.properties is there.
 *
 * Once HDFS is up and the ResourceManager reports a running NodeManager it
 * writes core-site.xml, hdfs-site.xml and yarn-site.xml into CONF_DIR (every
 * setting that differs from Hadoop's defaults), then CONF_DIR/cluster.properties
 * (addresses; its appearance means "ready"). It runs until SIGTERM/SIGINT,
 * then stops YARN (the NodeManager kills its containers) and HDFS, and exits.
 * Driven by ./scripts/minicluster.
 *
 * <p>While it runs it takes commands through files: WORK_DIR/control/NAME.cmd
 * (written atomically) holds one command line; the answer is written to
 * WORK_DIR/control/NAME.done ("ok ..." or "error ..."), then the .cmd file is
 * removed. The commands: {@code restart-namenode DOWN_MILLIS}: stop the
 * NameNode, keep it down for DOWN_MILLIS, start it again on the same ports (its
 * clients reconnect) and wait until it is out of safe mode;
 * {@code restart-rm NODES TIMEOUT_MILLIS}: stop the ResourceManager and start it
 * again on the same ports (it recovers its applications from the state store),
 * then wait until NODES NodeManagers are RUNNING in it again;
 * {@code nodes}: the NodeManagers the ResourceManager knows, one
 * "HOST:PORT STATE RACK" per line after "ok".
 */
public final class MiniCluster {

  /** Settings the servers make for themselves that clients must not inherit. */
  private static final Pattern SERVER_ONLY = Pattern.compile(
      "test\\.|rpc\\.engine\\.|hdfs\\.minidfs\\.|mapreduce\\.|net\\.topology\\.|yarn\\.is\\.minicluster|"
      + "yarn\\.minicluster\\.|yarn\\.timeline-service\\.");

  private MiniCluster() {
  }

  public static void main(String[] args) {
    int code = 0;
    try {
      run(args);
    } catch (Throwable t) {
      log("failed: " + t);
      t.printStackTrace();
      code = 1;
    }
    // Hadoop's servers leave non-daemon threads: only an explicit exit ends the JVM
    System.exit(code);
  }

  private static void run(String[] args) throws Exception {
    if (args.length != 5 && args.length != 7) {
      System.err.println("usage: stram.MiniCluster CONF_DIR WORK_DIR NM_MEMORY_MB NM_VCORES APP_CLASSPATH "
          + "[NODES TOPOLOGY_TABLE]");
      System.exit(2);
    }
    File confDir = new File(args[0]).getAbsoluteFile();
    File workDir = new File(args[1]).getAbsoluteFile();
    int nmMemory = Integer.parseInt(args[2]);
    int nmVcores = Integer.parseInt(args[3]);
    String appClasspath = args[4];
    int nodes = args.length == 7 ? Integer.parseInt(args[5]) : 1;
    boolean multi = nodes > 1;
    confDir.mkdirs();
    workDir.mkdirs();
    long started = System.nanoTime();

    Configuration defaults = new YarnConfiguration(new HdfsConfiguration());
    Configuration conf = new YarnConfiguration(new HdfsConfiguration());
    // ---- HDFS
    conf.set("dfs.replication", "1");
    conf.set("dfs.namenode.safemode.extension", "0");
    conf.set("hadoop.security.authentication", "simple");
    // a client closing a file asks the NameNode to complete it, retrying after 400 ms, 800 ms, ...
    // while the DataNode's block report is on its way: on one machine it is there in a few ms
    conf.set("dfs.client.block.write.locateFollowingBlock.initial.delay.ms", "20");
    // ---- YARN: resources for a master and several containers
    conf.setInt("yarn.minicluster.yarn.nodemanager.resource.memory-mb", nmMemory);
    conf.setInt(YarnConfiguration.NM_PMEM_MB, nmMemory);
    conf.setInt(YarnConfiguration.NM_VCORES, nmVcores);
    conf.setInt(YarnConfiguration.RM_SCHEDULER_MINIMUM_ALLOCATION_MB, 64);
    conf.setInt(YarnConfiguration.RM_SCHEDULER_MAXIMUM_ALLOCATION_MB, nmMemory);
    conf.setInt(YarnConfiguration.RM_SCHEDULER_MAXIMUM_ALLOCATION_VCORES, nmVcores);
    conf.setBoolean(YarnConfiguration.NM_PMEM_CHECK_ENABLED, false);
    conf.setBoolean(YarnConfiguration.NM_VMEM_CHECK_ENABLED, false);
    // a busy developer disk must not mark the only node unhealthy (Spark's BaseYarnClusterSuite does the same)
    conf.set("yarn.nodemanager.disk-health-checker.max-disk-utilization-per-disk-percentage", "100.0");
    conf.set("yarn.nodemanager.disk-health-checker.min-free-space-per-disk-mb", "0");
    // the minicluster jars ship no capacity-scheduler.xml: "default" has all of the cluster; two
    // more queues refuse every application, for tests of a refused submission: "stopped" is
    // STOPPED, "full" takes no more applications (maximum-applications 0)
    conf.set("yarn.scheduler.capacity.root.queues", "default,stopped,full");
    for (String q : new String[] {"stopped", "full"}) {
      conf.set("yarn.scheduler.capacity.root." + q + ".capacity", "0");
      conf.set("yarn.scheduler.capacity.root." + q + ".maximum-capacity", "100");
      conf.set("yarn.scheduler.capacity.root." + q + ".acl_submit_applications", "*");
    }
    conf.set("yarn.scheduler.capacity.root.stopped.state", "STOPPED");
    conf.set("yarn.scheduler.capacity.root.full.state", "RUNNING");
    conf.set("yarn.scheduler.capacity.root.full.maximum-applications", "0");
    conf.set("yarn.scheduler.capacity.root.default.capacity", "100");
    conf.set("yarn.scheduler.capacity.root.default.maximum-capacity", "100");
    conf.set("yarn.scheduler.capacity.root.default.user-limit-factor", "1");
    conf.set("yarn.scheduler.capacity.root.default.state", "RUNNING");
    conf.set("yarn.scheduler.capacity.root.default.acl_submit_applications", "*");
    conf.set("yarn.scheduler.capacity.root.default.acl_administer_queue", "*");
    conf.set("yarn.scheduler.capacity.maximum-am-resource-percent", "0.5");
    conf.set("yarn.scheduler.capacity.node-locality-delay", "-1");
    // container logs: aggregated into HDFS when an application ends (`yarn logs -applicationId`)
    conf.setBoolean(YarnConfiguration.LOG_AGGREGATION_ENABLED, true);
    conf.set(YarnConfiguration.NM_REMOTE_APP_LOG_DIR, "/tmp/logs");
    conf.setInt(YarnConfiguration.NM_LOG_RETAIN_SECONDS, 3600);
    // containers get only these variables of the NodeManager's environment: add libhdfs's JVM
    // options and the marker by which ./scripts/minicluster stop finds leftover processes
    conf.set(YarnConfiguration.NM_ENV_WHITELIST,
        defaults.get(YarnConfiguration.NM_ENV_WHITELIST, YarnConfiguration.DEFAULT_NM_ENV_WHITELIST)
        + ",LIBHDFS_OPTS,STRAM_MINICLUSTER");
    // the application master's (skein's) JVM classpath: the conf dir and these jars
    conf.set(YarnConfiguration.YARN_APPLICATION_CLASSPATH, appClasspath);
    conf.set(YarnConfiguration.RM_AM_MAX_ATTEMPTS, "4");
    // fixed (but free) ports: with ephemeral ones the RM's web proxy would hand out tracking
    // URLs with port 0, fixed before its web server bound
    conf.setBoolean(YarnConfiguration.YARN_MINICLUSTER_FIXED_PORTS, true);
    for (String key : new String[] {YarnConfiguration.RM_ADDRESS, YarnConfiguration.RM_ADMIN_ADDRESS,
        YarnConfiguration.RM_SCHEDULER_ADDRESS, YarnConfiguration.RM_RESOURCE_TRACKER_ADDRESS,
        YarnConfiguration.RM_WEBAPP_ADDRESS}) {
      conf.set(key, "localhost:" + freePort());
    }
    // node attributes are kept on the default file system unless told otherwise: keep them local
    conf.set("yarn.node-attribute.fs-store.root-dir", new File(workDir, "yarn/node-attributes").toURI().toString());
    // MiniYARNCluster keeps its directories under test.build.data
    System.setProperty("test.build.data", new File(workDir, "yarn").getPath());
    Map<String, String> kerberos = new TreeMap<>();
    String kerberosDir = System.getenv("STRAM_MINICLUSTER_KERBEROS");
    if (kerberosDir != null && !kerberosDir.isEmpty()) {
      kerberos = secure(conf, new File(kerberosDir).getAbsoluteFile());
      log("Kerberos: KDC for realm " + kerberos.get("kerberos.realm") + " up after " + seconds(started));
    }

    MiniDFSCluster dfs = new MiniDFSCluster.Builder(conf, new File(workDir, "dfs"))
        .numDataNodes(multi ? 2 : 1).format(true).build();
    dfs.waitActive();
    String fsUri = "hdfs://localhost:" + dfs.getNameNodePort();
    conf.set("fs.defaultFS", fsUri);
    log("HDFS up at " + fsUri + " after " + seconds(started));

    Map<String, String> clientExtra = new TreeMap<>();
    if (multi) {
      clientExtra = severalNodes(conf, workDir, args[6]);
    }
    // several nodes: the NodeManagers are processes of their own, this JVM runs none
    int ownNodes = multi ? 0 : 1;
    MiniYARNCluster yarn = new MiniYARNCluster("stram", ownNodes, 1, 1);
    // SIGTERM/SIGINT stop the cluster in order from this thread (Hadoop's own
    // shutdown hooks would race a stop done in a JVM shutdown hook)
    final CountDownLatch stop = new CountDownLatch(1);
    for (String name : new String[] {"TERM", "INT"}) {
      Signal.handle(new Signal(name), sig -> stop.countDown());
    }
    yarn.init(conf);
    yarn.start();
    Configuration yconf = yarn.getConfig();
    long deadline = System.nanoTime() + 120_000_000_000L;
    while (port(yconf.get(YarnConfiguration.RM_ADDRESS)) == 0
        || port(yconf.get(YarnConfiguration.RM_SCHEDULER_ADDRESS)) == 0
        || port(yconf.get(YarnConfiguration.RM_WEBAPP_ADDRESS)) == 0
        || runningNodes(yarn) < ownNodes) {
      if (System.nanoTime() > deadline) {
        throw new IllegalStateException("YARN did not come up within 120 s (RM "
            + yconf.get(YarnConfiguration.RM_ADDRESS) + ", running nodes " + runningNodes(yarn) + ")");
      }
      Thread.sleep(100);
    }
    log("YARN up: ResourceManager " + yconf.get(YarnConfiguration.RM_ADDRESS) + ", web "
        + yconf.get(YarnConfiguration.RM_WEBAPP_ADDRESS) + ", " + ownNodes + " NodeManager(s) in this JVM, after "
        + seconds(started));

    writeSites(yconf, defaults, confDir, clientExtra);
    Map<String, String> info = new TreeMap<>();
    info.put("fs.defaultFS", fsUri);
    info.put("namenode.http", "http://localhost:" + dfs.getNameNode().getHttpAddress().getPort());
    info.put("resourcemanager.address", yconf.get(YarnConfiguration.RM_ADDRESS));
    info.put("resourcemanager.webapp", "http://" + yconf.get(YarnConfiguration.RM_WEBAPP_ADDRESS));
    if (!multi) {
      info.put("nodemanager.address", yarn.getNodeManager(0).getNMContext().getNodeId().toString());
    }
    info.put("work.dir", workDir.getPath());
    info.put("pid", Long.toString(ProcessHandle.current().pid()));
    info.put("startup.seconds", seconds(started));
    File control = new File(workDir, "control");
    control.mkdirs();
    info.put("control.dir", control.getPath());
    info.putAll(kerberos);
    StringBuilder props = new StringBuilder();
    for (Map.Entry<String, String> e : info.entrySet()) {
      props.append(e.getKey()).append('=').append(e.getValue()).append('\n');
    }
    writeAtomically(new File(confDir, "cluster.properties"), props.toString());
    log("ready");
    while (!stop.await(200, TimeUnit.MILLISECONDS)) {
      serveControl(control, dfs, yarn);
    }
    log("stopping YARN (the NodeManager kills its containers)");
    try {
      yarn.stop();
    } catch (Throwable t) {
      log("stopping YARN: " + t);
    }
    log("stopping HDFS");
    try {
      dfs.shutdown(true);
    } catch (Throwable t) {
      log("stopping HDFS: " + t);
    }
    log("stopped");
  }

  /** Runs the commands waiting in the control directory (see the class comment), oldest name first. */
  private static void serveControl(File control, MiniDFSCluster dfs, MiniYARNCluster yarn) {
    File[] commands = control.listFiles((dir, name) -> name.endsWith(".cmd"));
    if (commands == null || commands.length == 0) {
      return;
    }
    Arrays.sort(commands);
    for (File cmd : commands) {
      String name = cmd.getName().substring(0, cmd.getName().length() - ".cmd".length());
      String answer;
      try {
        String[] words = new String(Files.readAllBytes(cmd.toPath()), StandardCharsets.UTF_8).trim().split("\\s+");
        answer = "ok " + runCommand(words, dfs, yarn);
      } catch (Throwable t) {
        log("command " + name + " failed: " + t);
        answer = "error " + t;
      }
      try {
        writeAtomically(new File(control, name + ".done"), answer + "\n");
      } catch (IOException e) {
        log("cannot answer command " + name + ": " + e);
      }
      cmd.delete();
    }
  }

  private static String runCommand(String[] words, MiniDFSCluster dfs, MiniYARNCluster yarn) throws Exception {
    if (words.length == 1 && words[0].equals("nodes")) {
      // the inactive (LOST, SHUTDOWN, ...) first: a node that registered again is in both, active last
      StringBuilder out = new StringBuilder();
      RMContext context = yarn.getResourceManager().getRMContext();
      for (Map<NodeId, RMNode> nodes : Arrays.asList(context.getInactiveRMNodes(), context.getRMNodes())) {
        for (RMNode node : nodes.values()) {
          out.append('\n').append(node.getNodeID()).append(' ').append(node.getState()).append(' ')
              .append(node.getRackName());
        }
      }
      return out.toString();
    }
    if (words.length == 3 && words[0].equals("restart-rm")) {
      int expect = Integer.parseInt(words[1]);
      long timeout = Long.parseLong(words[2]);
      long begun = System.nanoTime();
      log("restarting the ResourceManager; then waiting for " + expect + " NodeManager(s)");
      yarn.restartResourceManager(0);
      long up = System.nanoTime();
      long deadline = up + timeout * 1_000_000L;
      while (runningNodes(yarn) < expect) {
        if (System.nanoTime() > deadline) {
          throw new IllegalStateException("the ResourceManager is back, but only " + runningNodes(yarn) + " of "
              + expect + " NodeManagers re-registered within " + timeout + " ms");
        }
        Thread.sleep(100);
      }
      String done = "ResourceManager restarted in " + String.format("%.1fs", (up - begun) / 1e9) + ", "
          + expect + " NodeManager(s) RUNNING again " + seconds(up) + " later";
      log(done);
      return done;
    }
    if (words.length == 2 && words[0].equals("restart-namenode")) {
      long down = Long.parseLong(words[1]);
      int port = dfs.getNameNodePort();
      long begun = System.nanoTime();
      log("restarting the NameNode (port " + port + "), down for " + down + " ms");
      // the NameNode's configuration holds the ports it bound: it starts on them again
      dfs.shutdownNameNode(0);
      long stopped = System.nanoTime();
      Thread.sleep(down);
      dfs.restartNameNode(0, true);
      String done = "NameNode on port " + dfs.getNameNodePort() + " unavailable for "
          + seconds(stopped) + " (stopping it took " + String.format("%.1fs", (stopped - begun) / 1e9) + ")";
      log(done);
      return done;
    }
    throw new IllegalArgumentException("unknown command: " + String.join(" ", words));
  }

  /**
   * The ResourceManager of a cluster of several NodeManager processes: recovery (work-preserving, its
   * state in LevelDB under WORK_DIR), a NodeManager silent for 10 s is LOST, racks from a
   * TableMapping file, and clients that retry a restarting ResourceManager every second (instead of
   * every 30 s). Returns the settings clients must share with it (the topology: an application
   * master resolves the racks of the hosts it asks for as the ResourceManager does).
   */
  private static Map<String, String> severalNodes(Configuration conf, File workDir, String table) {
    conf.setBoolean(YarnConfiguration.RECOVERY_ENABLED, true);
    conf.setBoolean(YarnConfiguration.RM_WORK_PRESERVING_RECOVERY_ENABLED, true);
    conf.set(YarnConfiguration.RM_STORE,
        "org.apache.hadoop.yarn.server.resourcemanager.recovery.LeveldbRMStateStore");
    conf.set(YarnConfiguration.RM_LEVELDB_STORE_PATH, new File(workDir, "yarn/rm-state").getPath());
    // after a restart the scheduler waits this long for the nodes to report their containers
    conf.setInt(YarnConfiguration.RM_WORK_PRESERVING_RECOVERY_SCHEDULING_WAIT_MS, 3000);
    conf.setInt(YarnConfiguration.RM_NM_EXPIRY_INTERVAL_MS, 10_000);
    conf.setInt(YarnConfiguration.RESOURCEMANAGER_CONNECT_RETRY_INTERVAL_MS, 1000);
    Map<String, String> topology = new TreeMap<>();
    topology.put("net.topology.node.switch.mapping.impl", "org.apache.hadoop.net.TableMapping");
    topology.put("net.topology.table.file.name", table);
    for (Map.Entry<String, String> e : topology.entrySet()) {
      conf.set(e.getKey(), e.getValue());
    }
    return topology;
  }

  /**
   * Kerberos: a MiniKdc on 127.0.0.1 (realm STRAM.LOCAL), and HDFS and YARN in secure mode.
   * One service principal, stram/localhost, serves the NameNode, DataNode, ResourceManager and
   * NodeManager (a JVM has one login user) and maps to this JVM's user, the HDFS superuser;
   * HTTP/localhost is the NameNode web's SPNEGO principal. The current user gets a principal
   * of its own name and a keytab. DIR receives krb5.conf (a fixed path the NodeManager's
   * environment names before the KDC picks its port), cluster.keytab and user.keytab.
   * DataNodes run without privileged ports or SASL (ignore.secure.ports.for.testing).
   */
  private static Map<String, String> secure(Configuration conf, File dir) throws Exception {
    dir.mkdirs();
    Properties kdcConf = MiniKdc.createConf();
    kdcConf.setProperty(MiniKdc.KDC_BIND_ADDRESS, "127.0.0.1");
    kdcConf.setProperty(MiniKdc.ORG_NAME, "STRAM");
    kdcConf.setProperty(MiniKdc.ORG_DOMAIN, "LOCAL");
    MiniKdc kdc = new MiniKdc(kdcConf, new File(dir, "kdc"));
    kdc.start();
    String realm = kdc.getRealm();
    String user = System.getProperty("user.name");
    File clusterKeytab = new File(dir, "cluster.keytab");
    File userKeytab = new File(dir, "user.keytab");
    kdc.createPrincipal(clusterKeytab, "stram/localhost", "HTTP/localhost");
    kdc.createPrincipal(userKeytab, user);
    File krb5 = new File(dir, "krb5.conf");
    Files.copy(kdc.getKrb5conf().toPath(), krb5.toPath(), StandardCopyOption.REPLACE_EXISTING);
    System.setProperty("java.security.krb5.conf", krb5.getPath());
    String service = "stram/localhost@" + realm;
    String keytab = clusterKeytab.getPath();
    conf.set("hadoop.security.authentication", "kerberos");
    conf.set("hadoop.security.auth_to_local",
        "RULE:[2:$1@$0](stram@" + realm + ")s/.*/" + user + "/\nRULE:[1:$1@$0](.*@" + realm + ")s/@.*//\nDEFAULT");
    conf.set("dfs.namenode.kerberos.principal", service);
    conf.set("dfs.namenode.keytab.file", keytab);
    conf.set("dfs.datanode.kerberos.principal", service);
    conf.set("dfs.datanode.keytab.file", keytab);
    conf.set("dfs.web.authentication.kerberos.principal", "HTTP/localhost@" + realm);
    conf.set("dfs.web.authentication.kerberos.keytab", keytab);
    conf.setBoolean("dfs.block.access.token.enable", true);
    conf.setBoolean("ignore.secure.ports.for.testing", true);
    conf.set("yarn.resourcemanager.principal", service);
    conf.set("yarn.resourcemanager.keytab", keytab);
    conf.set("yarn.nodemanager.principal", service);
    conf.set("yarn.nodemanager.keytab", keytab);
    // The ResourceManager replaces an application's HDFS tokens at their maximum lifetime (as a
    // long-running service's cluster is set up), so NodeManagers can still localize new
    // containers; it fetches them as a proxy user for the application's user.
    conf.setBoolean(YarnConfiguration.RM_PROXY_USER_PRIVILEGES_ENABLED, true);
    conf.set("hadoop.proxyuser." + user + ".hosts", "*");
    conf.set("hadoop.proxyuser." + user + ".groups", "*");
    String lifetime = System.getenv("STRAM_MINICLUSTER_TOKEN_LIFETIME_MS");
    if (lifetime != null && !lifetime.isEmpty()) {  // delegation tokens die young: renewal tests
      conf.set("dfs.namenode.delegation.token.max-lifetime", lifetime);
      conf.set("dfs.namenode.delegation.token.renew-interval", lifetime);
      conf.set("yarn.resourcemanager.delegation.token.max-lifetime", lifetime);
      conf.set("yarn.resourcemanager.delegation.token.renew-interval", lifetime);
    }
    conf.set(YarnConfiguration.NM_ENV_WHITELIST,
        conf.get(YarnConfiguration.NM_ENV_WHITELIST) + ",KRB5_CONFIG,JAVA_TOOL_OPTIONS");
    UserGroupInformation.setConfiguration(conf);
    UserGroupInformation.loginUserFromKeytab(service, keytab);
    Map<String, String> info = new TreeMap<>();
    info.put("kerberos.realm", realm);
    info.put("kerberos.principal", user + "@" + realm);
    info.put("kerberos.keytab", userKeytab.getPath());
    info.put("kerberos.krb5conf", krb5.getPath());
    info.put("kerberos.kdc", "127.0.0.1:" + kdc.getPort());
    return info;
  }

  private static int freePort() throws IOException {
    try (ServerSocket socket = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
      return socket.getLocalPort();
    }
  }

  private static int runningNodes(MiniYARNCluster yarn) {
    try {
      return yarn.getResourceManager().getRMContext().getRMNodes().values().stream()
          .filter(n -> n.getState() == NodeState.RUNNING).mapToInt(n -> 1).sum();
    } catch (RuntimeException e) {
      return 0;
    }
  }

  private static int port(String hostPort) {
    if (hostPort == null || !hostPort.contains(":")) {
      return 0;
    }
    return Integer.parseInt(hostPort.substring(hostPort.lastIndexOf(':') + 1));
  }

  /**
   * Every setting that differs from Hadoop's defaults: dfs.* to hdfs-site, yarn.* to yarn-site, the rest
   * to core-site, and EXTRA (settings clients share with the servers) to core-site.
   */
  private static void writeSites(Configuration conf, Configuration defaults, File dir, Map<String, String> extra)
      throws IOException {
    Configuration core = new Configuration(false);
    Configuration hdfs = new Configuration(false);
    Configuration yarn = new Configuration(false);
    for (Map.Entry<String, String> e : conf) {
      String key = e.getKey();
      String value = conf.get(key);
      if (value == null || value.equals(defaults.get(key)) || SERVER_ONLY.matcher(key).lookingAt()) {
        continue;
      }
      if (key.startsWith("dfs.")) {
        hdfs.set(key, value);
      } else if (key.startsWith("yarn.")) {
        yarn.set(key, value);
      } else {
        core.set(key, value);
      }
    }
    for (Map.Entry<String, String> e : extra.entrySet()) {
      core.set(e.getKey(), e.getValue());
    }
    writeConf(core, new File(dir, "core-site.xml"));
    writeConf(hdfs, new File(dir, "hdfs-site.xml"));
    writeConf(yarn, new File(dir, "yarn-site.xml"));
  }

  private static void writeConf(Configuration conf, File target) throws IOException {
    File tmp = new File(target.getPath() + ".tmp");
    try (OutputStream out = new FileOutputStream(tmp)) {
      conf.writeXml(out);
    }
    Files.move(tmp.toPath(), target.toPath(), StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
  }

  private static void writeAtomically(File target, String text) throws IOException {
    File tmp = new File(target.getPath() + ".tmp");
    try (PrintWriter w = new PrintWriter(tmp, StandardCharsets.UTF_8)) {
      w.print(text);
    }
    Files.move(tmp.toPath(), target.toPath(), StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
  }

  private static String seconds(long since) {
    return String.format("%.1fs", (System.nanoTime() - since) / 1e9);
  }

  private static void log(String message) {
    System.err.println("stram-minicluster: " + message);
    System.err.flush();
  }
}
