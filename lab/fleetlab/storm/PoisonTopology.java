// The lab's Storm topology (fleetlab.storm): storm-kafka's KafkaSpout reading one topic of the lab's
// Kafka 0.9 cluster into a bolt that acks every record except the poison one, which it fails every
// time (the spout replays it forever and its committed offset stops there). It runs on a
// LocalCluster whose cluster state lives in the lab's ZooKeeper (storm.zookeeper.root, /storm by
// default), and the spout commits its offsets into the same ZooKeeper below SpoutConfig.zkRoot.
//
// One argument: a properties file (written by fleetlab.storm) with zk.host, zk.port,
// kafka.brokers.path, topic, spout.root, spout.id, topology.name, poison, stop.file. When the stop
// file appears, the topology is killed (Nimbus removes its StormBase and assignment from ZooKeeper,
// as `storm kill` does) and the JVM exits.
package fleetlab.storm;

import java.io.File;
import java.io.FileInputStream;
import java.io.InputStream;
import java.util.Collections;
import java.util.Map;
import java.util.Properties;

import org.apache.storm.Config;
import org.apache.storm.LocalCluster;
import org.apache.storm.generated.KillOptions;
import org.apache.storm.generated.TopologySummary;
import org.apache.storm.kafka.KafkaSpout;
import org.apache.storm.kafka.SpoutConfig;
import org.apache.storm.kafka.StringScheme;
import org.apache.storm.kafka.ZkHosts;
import org.apache.storm.spout.SchemeAsMultiScheme;
import org.apache.storm.task.OutputCollector;
import org.apache.storm.task.TopologyContext;
import org.apache.storm.topology.OutputFieldsDeclarer;
import org.apache.storm.topology.TopologyBuilder;
import org.apache.storm.topology.base.BaseRichBolt;
import org.apache.storm.tuple.Tuple;

public final class PoisonTopology {

    /** Acks every record but the poison one, which it fails (the spout replays it, forever). */
    public static final class PoisonBolt extends BaseRichBolt {
        private final String poison;
        private transient OutputCollector collector;

        public PoisonBolt(String poison) {
            this.poison = poison;
        }

        @Override
        public void prepare(Map conf, TopologyContext context, OutputCollector collector) {
            this.collector = collector;
        }

        @Override
        public void execute(Tuple tuple) {
            if (poison.equals(tuple.getString(0))) {
                collector.fail(tuple);
            } else {
                collector.ack(tuple);
            }
        }

        @Override
        public void declareOutputFields(OutputFieldsDeclarer declarer) {
        }
    }

    private PoisonTopology() {
    }

    public static void main(String[] args) throws Exception {
        Properties p = new Properties();
        try (InputStream in = new FileInputStream(args[0])) {
            p.load(in);
        }
        String zkHost = p.getProperty("zk.host");
        int zkPort = Integer.parseInt(p.getProperty("zk.port"));
        String name = p.getProperty("topology.name");

        ZkHosts hosts = new ZkHosts(zkHost + ":" + zkPort, p.getProperty("kafka.brokers.path"));
        SpoutConfig spout = new SpoutConfig(hosts, p.getProperty("topic"), p.getProperty("spout.root"),
                p.getProperty("spout.id"));
        spout.zkServers = Collections.singletonList(zkHost);
        spout.zkPort = zkPort;
        spout.scheme = new SchemeAsMultiScheme(new StringScheme());
        spout.startOffsetTime = kafka.api.OffsetRequest.EarliestTime();
        spout.stateUpdateIntervalMs = 1000;
        spout.retryDelayMaxMs = 1000;

        TopologyBuilder builder = new TopologyBuilder();
        builder.setSpout("kafka", new KafkaSpout(spout), 1);
        builder.setBolt("poison", new PoisonBolt(p.getProperty("poison")), 1).shuffleGrouping("kafka");

        Config conf = new Config();
        conf.setNumWorkers(1);
        conf.setMaxSpoutPending(100);
        conf.setMessageTimeoutSecs(10);

        LocalCluster cluster = new LocalCluster(zkHost, (long) zkPort);
        // a previous run's topology of the same name may still be registered until this nimbus has
        // cleaned it up, and this nimbus may not lead yet: retry the submission for a while
        long deadline = System.currentTimeMillis() + 180_000;
        while (true) {
            try {
                cluster.submitTopology(name, conf, builder.createTopology());
                break;
            } catch (Exception e) {
                if (System.currentTimeMillis() > deadline) {
                    throw e;
                }
                System.err.println("submit of " + name + " not accepted yet (" + e + "); retrying");
                Thread.sleep(3000);
            }
        }
        System.out.println("topology " + name + " submitted");
        File stop = new File(p.getProperty("stop.file"));
        while (!stop.exists()) {
            Thread.sleep(500);
        }
        KillOptions kill = new KillOptions();
        kill.set_wait_secs(0);
        cluster.killTopologyWithOpts(name, kill);
        long until = System.currentTimeMillis() + 60_000;
        while (listed(cluster, name) && System.currentTimeMillis() < until) {
            Thread.sleep(500);
        }
        System.out.println("topology " + name + (listed(cluster, name) ? " still listed" : " killed"));
        System.exit(0);
    }

    private static boolean listed(LocalCluster cluster, String name) {
        for (TopologySummary t : cluster.getClusterInfo().get_topologies()) {
            if (name.equals(t.get_name())) {
                return true;
            }
        }
        return false;
    }
}
