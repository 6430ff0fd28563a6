#!/usr/bin/env bash
# System packages the tests need: kcat (a real librdkafka CLI client), a
# Java 17 runtime for Spark, and ZooKeeper 3.8 (Debian's jar; the cluster mode's
# coordination service, started by the tests and `headwater cluster` themselves),
# and chromium for the console's browser tests.
# Installed through apt-get when missing.
set -euo pipefail
need=()
command -v kcat >/dev/null 2>&1 || need+=(kcat)
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
[ -f /usr/share/java/zookeeper.jar ] || need+=(zookeeper)
# The web console's browser tests drive Debian's chromium through Playwright
# (executable_path=/usr/bin/chromium; no browser download).
command -v chromium >/dev/null 2>&1 || need+=(chromium)
# The network-partition campaign (issue 31): nodes in network namespaces (ip),
# cuts as nftables drop rules (nft).
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v nft >/dev/null 2>&1 || need+=(nftables)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing system packages: ${need[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
