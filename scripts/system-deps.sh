#!/usr/bin/env bash
# System packages the tests need: kcat (a real librdkafka CLI client) and a
# Java 17 runtime for Spark. Installed through apt-get when missing.
set -euo pipefail
need=()
command -v kcat >/dev/null 2>&1 || need+=(kcat)
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing system packages: ${need[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
