# ghcr.io/seed-6b3823f5/ratelimit-rls (images/build.sh): the Envoy rate
# limit service, a static binary alone, non-root, at /bin/rls and at
# /bin/ratelimit (where envoyproxy/ratelimit's image has its binary, and
# Envoy Gateway calls it), configured by envoyproxy/ratelimit's
# environment variables and listening on every address of the container:
# gRPC on 8081, /healthcheck and /metrics on 8080. Nothing runs while it
# is built, so it builds for any architecture.
FROM scratch
COPY bin/ /bin/
COPY usr/ /usr/
WORKDIR /srv/runtime_data/current/config
WORKDIR /
ENV HOST=0.0.0.0 GRPC_HOST=0.0.0.0
EXPOSE 8080 8081
USER 65532:65532
HEALTHCHECK --interval=5s --timeout=3s --start-period=5s CMD ["/bin/rls", "-healthcheck"]
ENTRYPOINT ["/bin/rls"]
