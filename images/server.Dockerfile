# ghcr.io/seed-6b3823f5/ratelimit-redis and -valkey (images/build.sh):
# Debian trixie's server with the ratelimit module loaded, listening on
# port 6379 of the container:
#   docker run -p 127.0.0.1:6379:6379 ghcr.io/seed-6b3823f5/ratelimit-redis
ARG BASE
FROM ${BASE}
ARG SERVER
ARG RUNAS
ENV RATELIMIT_SERVER=${SERVER}
COPY ratelimit.so /usr/lib/ratelimit/ratelimit.so
COPY entrypoint.sh /usr/local/bin/ratelimit-entrypoint
COPY LICENSE /usr/share/doc/ratelimit/LICENSE
RUN mkdir -p /data && chown "${RUNAS}:${RUNAS}" /data
WORKDIR /data
VOLUME /data
USER ${RUNAS}
EXPOSE 6379
HEALTHCHECK --interval=5s --timeout=3s --start-period=10s CMD "${RATELIMIT_SERVER%-server}-cli" ping | grep -q PONG
ENTRYPOINT ["ratelimit-entrypoint"]
