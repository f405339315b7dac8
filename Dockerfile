# Tally in a container: a multi-stage build on Debian 12, running as a non-root user, the store
# in a volume, and a health check that asks the server itself (`tally health`; the image has no
# shell tools). Build: `podman build -t tally .` (or docker/buildah); run:
#   podman run -d -p 8000:8000 -v tally-data:/data tally
# `cargo xtask docker` builds it from the release binary the host built instead (no second
# compile) and smoke-tests it: README.md, "Packaging".

# ---- build ----
FROM docker.io/library/rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p tally && strip target/release/tally

# ---- run ----
FROM docker.io/library/debian:bookworm-slim
# ca-certificates: TLS to DynamoDB, SMTP and webhooks. Nothing else is needed at run time.
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /data --shell /usr/sbin/nologin tally \
    && mkdir -p /data && chown tally:tally /data && chmod 0700 /data
COPY --from=build /src/target/release/tally /usr/local/bin/tally
USER tally
WORKDIR /data
ENV TALLY_STORE=/data/store \
    TALLY_LISTEN=0.0.0.0:8000
VOLUME ["/data"]
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=6s --start-period=20s --retries=3 \
    CMD ["tally", "health", "--addr", "127.0.0.1:8000"]
ENTRYPOINT ["tally"]
CMD ["serve"]
