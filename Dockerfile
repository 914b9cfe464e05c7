# transfer-sidecar: runs beside php-fpm (same pod / network namespace), so PHP reaches the default
# listener 127.0.0.1:8765. The embedded default's unix socket (<state>/sidecar.sock, 0660), spool
# (<state>/spool) and root (<state>/files) belong to node:node (1000:1000, dirs 0750): a PHP
# running as another user (www-data) can use none of them. Mount a config that names a socket
# group, a spool and roots shared with PHP (see deploy/kubernetes/transfer-sidecar.yaml).
# Node 26 (LTS): the runtime the test suites run on in CI (package.json allows 24 and 26).
FROM node:26-slim

ENV NODE_ENV=production \
    STATE_DIRECTORY=/var/lib/transfer-sidecar \
    SIDECAR_HEALTH_URL=http://127.0.0.1:8765/healthz
WORKDIR /app

COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force
COPY bin ./bin
COPY src ./src
COPY README.md CHANGELOG.md ./

# The image's unprivileged "node" user owns the state dir (journal, socket, default store).
RUN mkdir -p /var/lib/transfer-sidecar && chown node:node /var/lib/transfer-sidecar
USER node
VOLUME ["/var/lib/transfer-sidecar"]
EXPOSE 8765

HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
  CMD ["node", "-e", "fetch(process.env.SIDECAR_HEALTH_URL).then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]

# Mount a config and set SIDECAR_CONFIG=/etc/transfer-sidecar/config.json for real targets.
ENTRYPOINT ["node", "--max-semi-space-size=8", "--heap-growing-percent=50", "bin/transfer-sidecar.js"]
