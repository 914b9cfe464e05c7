#!/usr/bin/env bash
# Installs everything the test suites need on a fresh Debian 12 machine and runs every suite:
# Debian packages (Apache httpd with mod_dav and mod_ssl, curl, openssl, PHP with curl and PHPUnit, Prometheus, strace, and a JDK
# and Maven when missing), the npm dependencies, the Hadoop jars for the MiniDFSCluster harness
# (Maven), then lint and every suite (vitest, which also runs PHPUnit).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=()
for p in apache2 curl iproute2 nginx openssl php-cli php-curl php8.2-fpm phpunit prometheus strace systemd wrk; do dpkg -s "$p" >/dev/null 2>&1 || packages+=("$p"); done
command -v java >/dev/null 2>&1 || packages+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null 2>&1 || packages+=(maven)
if [ ${#packages[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  echo "test-all: installing Debian packages: ${packages[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${packages[@]}"
fi

# Node 24 or newer: where the machine's node is older (Debian's, or an image's Node 20, end of life
# since 2026-04-30), scripts/node.sh installs Node 26 into .tools/node, and everything below runs on it.
node_bin=$(bash scripts/node.sh --bin-dir)
[ -z "$node_bin" ] || export PATH="$node_bin:$PATH"
echo "test-all: node $(node -v), npm $(npm -v)"

echo "test-all: npm ci"
npm ci --no-audit --no-fund

echo "test-all: building the MiniDFSCluster harness (Maven)"
node --input-type=module -e "await (await import('./test/harness/hdfs.js')).buildHdfsHarness({ force: false })"

echo "test-all: lint and test suites"
npm test
