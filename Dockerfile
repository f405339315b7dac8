# Tally in a container: a multi-stage build on Debian 12, running as a non-root user, the store
# in a volume, and a health check that asks the server itself (`tally health`, at the `listen`
# address; the image has no shell tools). Build: `podman build -t tally .` (or docker/buildah);
# run:
#   podman run -d -p 8000:8000 -v tally-data:/data tally
# `cargo xtask docker` builds the `prebuilt` target instead, from the release binary the host
# built (no second compile), and smoke-tests it: README.md, "Packaging".
ARG BASE=docker.io/library/debian:bookworm-slim
ARG BUILDER=docker.io/library/rust:1-bookworm

# ---- build ----
FROM ${BUILDER} AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p tally && strip target/release/tally

# ---- what every final image holds but the binary ----
FROM ${BASE} AS runtime
# ca-certificates: TLS to DynamoDB, SMTP and webhooks. Nothing else is needed at run time.
# apt's lists and package caches go in the same layer (Debian's own image keeps no caches; a base
# made with mmdebstrap does, 78 MB of them).
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/cache/apt/archives/*.deb \
    && useradd --system --uid 10001 --home-dir /data --shell /usr/sbin/nologin tally \
    && mkdir -p /data && chown tally:tally /data && chmod 0700 /data
USER tally
WORKDIR /data
ENV TALLY_STORE=/data/store \
    TALLY_LISTEN=0.0.0.0:8000
VOLUME ["/data"]
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=6s --start-period=20s --retries=3 \
    CMD ["tally", "health"]
ENTRYPOINT ["tally"]
CMD ["serve"]

# ---- from a binary built outside, in the build context as `tally` (cargo xtask docker) ----
FROM runtime AS prebuilt
COPY tally /usr/local/bin/tally

# ---- the default: built here ----
FROM runtime
COPY --from=build /src/target/release/tally /usr/local/bin/tally
