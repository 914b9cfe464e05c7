package sidecar.harness;

import java.io.BufferedReader;
import java.io.File;
import java.io.FileOutputStream;
import java.io.FileDescriptor;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.Field;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeoutException;
import java.util.function.BooleanSupplier;
import java.util.logging.Level;
import java.util.logging.Logger;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.FileUtil;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.hdfs.DFSConfigKeys;
import org.apache.hadoop.hdfs.HdfsConfiguration;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import org.apache.hadoop.hdfs.MiniDFSCluster.DataNodeProperties;
import org.apache.hadoop.hdfs.MiniDFSNNTopology;
import org.apache.hadoop.hdfs.protocol.HdfsConstants.DatanodeReportType;
import org.apache.hadoop.hdfs.server.blockmanagement.DatanodeDescriptor;
import org.apache.hadoop.hdfs.server.datanode.DataNode;
import org.apache.hadoop.hdfs.server.namenode.NameNode;
import org.apache.hadoop.security.UserGroupInformation;

/**
 * Test-only launcher: an in-process Hadoop MiniDFSCluster with WebHDFS on, all
 * ports ephemeral on 127.0.0.1, driven over stdin/stdout.
 *
 * <p>Flags: {@code --datanodes N} (default 1), {@code --ha} (two namenodes,
 * index 0 active, index 1 standby), {@code --base DIR} (default: a fresh temp
 * dir, removed at exit), {@code --blocksize BYTES} (dfs.blocksize; multiple of
 * 512; the namenode's minimum block size is lowered to 0 so small values work),
 * {@code --https} (WebHDFS over HTTPS only, namenodes and datanodes; the
 * keystore is named by an ssl-server.xml the caller puts on the classpath).
 *
 * <p>Protocol: once up, exactly one stdout line {@code READY {json}}. Then one
 * command per stdin line, each answered by one stdout line {@code OK <cmd>} or
 * {@code ERR <message>}. Everything else (logs) goes to stderr. EOF or
 * {@code quit} shuts the cluster down (deleting its dirs) and exits 0.
 *
 * <p>Namenode and datanode indexes are the ones in the READY line and stay
 * stable across stop/restart; restarted nodes keep their ports.
 */
public final class MiniHdfs {
  /** Strong refs so java.util.logging does not GC our level settings. */
  private static final List<Logger> JUL_PINNED = new ArrayList<>();

  /** The real stdout: the control channel. System.out is redirected to stderr. */
  private static PrintStream control;

  /** Limit for the waits inside restart commands. */
  private static final long WAIT_MS = 60_000;

  private final MiniDFSCluster cluster;
  private final boolean ha;
  /** Original datanode index -> running DataNode, or null while stopped. */
  private final DataNode[] dnRunning;
  /** Original datanode index -> properties of a stopped datanode. */
  private final DataNodeProperties[] dnStopped;
  private final int[] dnHttpPorts;
  private final boolean https;

  private MiniHdfs(MiniDFSCluster cluster, boolean ha, boolean https) {
    this.cluster = cluster;
    this.ha = ha;
    this.https = https;
    List<DataNode> dns = cluster.getDataNodes();
    this.dnRunning = dns.toArray(new DataNode[0]);
    this.dnStopped = new DataNodeProperties[dnRunning.length];
    this.dnHttpPorts = new int[dnRunning.length];
    for (int i = 0; i < dnRunning.length; i++) {
      dnHttpPorts[i] = https ? dnRunning[i].getInfoSecurePort() : dnRunning[i].getInfoPort();
    }
  }

  public static void main(String[] args) {
    control = new PrintStream(new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);
    System.setOut(System.err);
    for (String name : new String[] {"com.sun.jersey", "org.glassfish", "javax.ws.rs"}) {
      Logger l = Logger.getLogger(name);
      l.setLevel(Level.SEVERE);
      JUL_PINNED.add(l);
    }
    int code;
    try {
      code = run(args);
    } catch (Throwable t) {
      System.err.println("MiniHdfs: fatal: " + t);
      t.printStackTrace(System.err);
      code = 1;
    }
    System.err.flush();
    control.flush();
    // Hadoop leaves non-daemon threads behind; do not wait for them.
    Runtime.getRuntime().halt(code);
  }

  private static int run(String[] args) throws Exception {
    int datanodes = 1;
    boolean ha = false;
    String base = null;
    Long blocksize = null;
    boolean https = false;
    for (int i = 0; i < args.length; i++) {
      String a = args[i];
      switch (a) {
        case "--datanodes": datanodes = Integer.parseInt(needValue(args, ++i, a)); break;
        case "--ha": ha = true; break;
        case "--base": base = needValue(args, ++i, a); break;
        case "--blocksize": blocksize = Long.parseLong(needValue(args, ++i, a)); break;
        case "--https": https = true; break;
        default: throw new IllegalArgumentException("unknown argument: " + a);
      }
    }
    if (datanodes < 0) {
      throw new IllegalArgumentException("--datanodes must be >= 0");
    }

    boolean tempBase = base == null;
    File baseDir = tempBase
        ? Files.createTempDirectory("minihdfs-").toFile()
        : new File(base).getAbsoluteFile();
    if (!baseDir.isDirectory() && !baseDir.mkdirs()) {
      throw new IllegalStateException("cannot create base dir " + baseDir);
    }

    Configuration conf = new HdfsConfiguration();
    conf.set("hadoop.tmp.dir", new File(baseDir, "hadoop-tmp").getAbsolutePath());
    conf.setBoolean("dfs.webhdfs.enabled", true);
    conf.setBoolean(DFSConfigKeys.DFS_PERMISSIONS_ENABLED_KEY, true);
    // Replication follows the datanode count (max 3), so files are not
    // permanently under-replicated on small clusters.
    conf.setInt(DFSConfigKeys.DFS_REPLICATION_KEY, Math.max(1, Math.min(3, datanodes)));
    // Faster datanode (re-)registration after restarts (default 3 s).
    conf.setLong(DFSConfigKeys.DFS_HEARTBEAT_INTERVAL_KEY, 1);
    // Drop idle IPC connections quickly (default 10 s): a namenode restarts
    // here within seconds, and a datanode's cached connection to the old
    // process would otherwise fail the next WebHDFS call with 403 EOFException.
    conf.setInt("ipc.client.connection.maxidletime", 1000);
    // A file is closed (namenode complete()) once the namenode has heard from the datanode that
    // its last block is stored; when the close comes first, the writer (for WebHDFS the
    // datanode's own client) sleeps 400 ms before asking again (DFSOutputStream.completeFile),
    // and here that happened to most uploads, whoever sent them: a 10 MiB upload took
    // 0.06 s or 0.47 s. Asking again after 10 ms (doubling, 10 times: 10 s in all) measures
    // the transfer instead of that coin toss.
    conf.setLong("dfs.client.block.write.locateFollowingBlock.initial.delay.ms", 10);
    conf.setInt("dfs.client.block.write.locateFollowingBlock.retries", 10);
    if (https) {
      conf.set(DFSConfigKeys.DFS_HTTP_POLICY_KEY, "HTTPS_ONLY");
      conf.set(DFSConfigKeys.DFS_NAMENODE_HTTPS_ADDRESS_KEY, "127.0.0.1:0");
      conf.set(DFSConfigKeys.DFS_DATANODE_HTTPS_ADDRESS_KEY, "127.0.0.1:0");
    }
    if (blocksize != null) {
      conf.setLong(DFSConfigKeys.DFS_BLOCK_SIZE_KEY, blocksize);
      conf.setLong(DFSConfigKeys.DFS_NAMENODE_MIN_BLOCK_SIZE_KEY, 0);
    }

    long t0 = System.nanoTime();
    MiniDFSCluster.Builder builder = new MiniDFSCluster.Builder(conf, baseDir)
        .numDataNodes(datanodes)
        .format(true)
        .waitSafeMode(true);
    if (ha) {
      builder.nnTopology(MiniDFSNNTopology.simpleHATopology());
    } else {
      builder.nameNodePort(0).nameNodeHttpPort(0);
    }
    MiniDFSCluster cluster = null;
    boolean quit = false;
    try {
      cluster = builder.build();
      cluster.waitActive();
      if (ha) {
        cluster.transitionToActive(0);
        cluster.waitActive();
      }
      MiniHdfs h = new MiniHdfs(cluster, ha, https);
      h.mkdir("/tmp", null, null, (short) 01777);
      System.err.printf("MiniHdfs: up in %d ms (base %s)%n",
          (System.nanoTime() - t0) / 1_000_000, baseDir);
      control.println("READY " + h.readyJson());
      quit = h.loop();
    } finally {
      try {
        if (cluster != null) {
          cluster.shutdown(true);
        }
      } catch (Throwable t) {
        System.err.println("MiniHdfs: error during shutdown: " + t);
      }
      if (tempBase && baseDir.exists()) {
        FileUtil.fullyDelete(baseDir);
      }
    }
    if (quit) {
      // Answered once the cluster is down; the caller then only waits for exit.
      control.println("OK quit");
    }
    return 0;
  }

  private static String needValue(String[] args, int i, String flag) {
    if (i >= args.length) {
      throw new IllegalArgumentException(flag + " needs a value");
    }
    return args[i];
  }

  private String readyJson() throws Exception {
    StringBuilder nns = new StringBuilder();
    StringBuilder rpc = new StringBuilder();
    for (int i = 0; i < cluster.getNumNameNodes(); i++) {
      NameNode nn = cluster.getNameNode(i);
      if (i > 0) {
        nns.append(',');
        rpc.append(',');
      }
      nns.append(jsonString(https
          ? "https://127.0.0.1:" + nn.getHttpsAddress().getPort()
          : "http://127.0.0.1:" + nn.getHttpAddress().getPort()));
      rpc.append(jsonString("hdfs://127.0.0.1:" + nn.getNameNodeAddress().getPort()));
    }
    StringBuilder dns = new StringBuilder();
    for (int i = 0; i < dnHttpPorts.length; i++) {
      if (i > 0) {
        dns.append(',');
      }
      dns.append(jsonString("127.0.0.1:" + dnHttpPorts[i]));
    }
    String user = UserGroupInformation.getCurrentUser().getShortUserName();
    return "{\"namenodes\":[" + nns + "],\"datanodes\":[" + dns + "],\"rpc\":[" + rpc
        + "],\"superuser\":" + jsonString(user) + ",\"ha\":" + ha + "}";
  }

  private static String jsonString(String s) {
    StringBuilder b = new StringBuilder("\"");
    for (char c : s.toCharArray()) {
      if (c == '"' || c == '\\') {
        b.append('\\').append(c);
      } else if (c < 0x20) {
        b.append(String.format("\\u%04x", (int) c));
      } else {
        b.append(c);
      }
    }
    return b.append('"').toString();
  }

  /** Runs commands until EOF (returns false) or {@code quit} (returns true). */
  private boolean loop() throws Exception {
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    String line;
    while ((line = in.readLine()) != null) {
      line = line.trim();
      if (line.isEmpty()) {
        continue;
      }
      if (line.equals("quit")) {
        System.err.println("MiniHdfs: quit, shutting down");
        return true;
      }
      try {
        execute(line.split("\\s+"));
        control.println("OK " + line);
      } catch (Throwable t) {
        System.err.println("MiniHdfs: command failed: " + line);
        t.printStackTrace(System.err);
        String msg = t.getClass().getSimpleName() + ": " + t.getMessage();
        control.println("ERR " + msg.replaceAll("[\\r\\n]+", " | "));
      }
    }
    System.err.println("MiniHdfs: stdin closed, shutting down");
    return false;
  }

  private void execute(String[] w) throws Exception {
    switch (w[0]) {
      case "transition-to-standby":
        argc(w, 2);
        cluster.transitionToStandby(nnIndex(w[1], true));
        break;
      case "transition-to-active":
        argc(w, 2);
        cluster.transitionToActive(nnIndex(w[1], true));
        break;
      case "shutdown-namenode":
        argc(w, 2);
        cluster.shutdownNameNode(nnIndex(w[1], false));
        break;
      case "restart-namenode":
        argc(w, 2);
        restartNameNode(nnIndex(w[1], false));
        break;
      case "stop-datanode":
        argc(w, 2);
        stopDataNode(dnIndex(w[1]));
        break;
      case "restart-datanode":
        argc(w, 2);
        restartDataNode(dnIndex(w[1]));
        break;
      case "mkdir": {
        argc(w, 4);
        String owner = w[2];
        String group = null;
        int colon = owner.indexOf(':');
        if (colon >= 0) {
          group = owner.substring(colon + 1);
          owner = owner.substring(0, colon);
        }
        mkdir(w[1], owner, group, (short) Integer.parseInt(w[3], 8));
        break;
      }
      default:
        throw new IllegalArgumentException("unknown command: " + w[0]);
    }
  }

  private static void argc(String[] w, int n) {
    if (w.length != n) {
      throw new IllegalArgumentException(w[0] + " takes " + (n - 1) + " argument(s)");
    }
  }

  private int nnIndex(String s, boolean needHa) {
    int i = Integer.parseInt(s);
    if (i < 0 || i >= cluster.getNumNameNodes()) {
      throw new IllegalArgumentException("no namenode " + i);
    }
    if (needHa && !ha) {
      throw new IllegalStateException("not an HA cluster (start with --ha)");
    }
    return i;
  }

  private int dnIndex(String s) {
    int i = Integer.parseInt(s);
    if (i < 0 || i >= dnRunning.length) {
      throw new IllegalArgumentException("no datanode " + i);
    }
    return i;
  }

  private void stopDataNode(int i) throws Exception {
    if (dnRunning[i] == null) {
      throw new IllegalStateException("datanode " + i + " is not running");
    }
    int idx = cluster.getDataNodes().indexOf(dnRunning[i]);
    if (idx < 0) {
      throw new IllegalStateException("datanode " + i + " not found in cluster");
    }
    DataNodeProperties props = cluster.stopDataNode(idx);
    // Keep the HTTP(S) port too (MiniDFSCluster only keeps the xfer and IPC ports).
    Field f = DataNodeProperties.class.getDeclaredField("conf");
    f.setAccessible(true);
    ((Configuration) f.get(props)).set(https
        ? DFSConfigKeys.DFS_DATANODE_HTTPS_ADDRESS_KEY : DFSConfigKeys.DFS_DATANODE_HTTP_ADDRESS_KEY,
        "127.0.0.1:" + dnHttpPorts[i]);
    dnStopped[i] = props;
    dnRunning[i] = null;
  }

  private void restartDataNode(int i) throws Exception {
    if (dnRunning[i] != null) {
      stopDataNode(i);
    }
    DataNodeProperties props = dnStopped[i];
    long since = System.currentTimeMillis();
    int before = cluster.getDataNodes().size();
    cluster.restartDataNode(props, true);
    DataNode dn = cluster.getDataNodes().get(before);
    dnRunning[i] = dn;
    dnStopped[i] = null;
    // Not cluster.waitActive(): it waits until the namenode's live count equals
    // the running count, forever if another datanode is stopped but not yet
    // expired (~10 min). Wait for this datanode only.
    waitFor("datanode " + i + " to start", dn::isDatanodeFullyStarted);
    for (int n = 0; n < cluster.getNumNameNodes(); n++) {
      NameNode nn = cluster.getNameNode(n);
      if (nn != null) {
        waitFor("datanode " + i + " to heartbeat namenode " + n,
            () -> heartbeatSeen(nn, dn.getDatanodeUuid(), since));
      }
    }
  }

  /**
   * Restart namenode i on the same ports (in HA it comes back as standby), then
   * wait until every running datanode heartbeated it and it left safe mode.
   */
  private void restartNameNode(int i) throws Exception {
    cluster.restartNameNode(i, false);
    NameNode nn = cluster.getNameNode(i);
    for (int d = 0; d < dnRunning.length; d++) {
      DataNode dn = dnRunning[d];
      if (dn != null) {
        waitFor("datanode " + d + " to register with namenode " + i,
            () -> heartbeatSeen(nn, dn.getDatanodeUuid(), 0));
      }
    }
    waitFor("namenode " + i + " to leave safe mode (blocks only on stopped datanodes?)",
        () -> !nn.isInSafeMode());
  }

  private static boolean heartbeatSeen(NameNode nn, String uuid, long since) {
    for (DatanodeDescriptor d : nn.getNamesystem().getBlockManager().getDatanodeManager()
        .getDatanodeListForReport(DatanodeReportType.LIVE)) {
      if (d.getDatanodeUuid().equals(uuid) && d.getCapacity() > 0 && d.getLastUpdate() > since) {
        return true;
      }
    }
    return false;
  }

  private static void waitFor(String what, BooleanSupplier cond) throws Exception {
    long deadline = System.nanoTime() + WAIT_MS * 1_000_000L;
    while (!cond.getAsBoolean()) {
      if (System.nanoTime() > deadline) {
        throw new TimeoutException("timed out after " + WAIT_MS + " ms waiting for " + what);
      }
      Thread.sleep(100);
    }
  }

  /** Index of the first running, active namenode. */
  private int activeNameNode() {
    for (int i = 0; i < cluster.getNumNameNodes(); i++) {
      NameNode nn = cluster.getNameNode(i);
      if (nn != null && nn.isActiveState()) {
        return i;
      }
    }
    throw new IllegalStateException("no active namenode");
  }

  private void mkdir(String path, String owner, String group, short mode) throws Exception {
    FileSystem fs = cluster.getFileSystem(activeNameNode());
    Path p = new Path(path);
    if (!fs.mkdirs(p)) {
      throw new IllegalStateException("mkdirs failed: " + path);
    }
    if (owner != null || group != null) {
      fs.setOwner(p, owner, group);
    }
    fs.setPermission(p, new FsPermission(mode));
  }
}
