# The two commands that matter: `make run` and `make test`. `make help` lists
# the rest. Everything a fresh Debian machine lacks is installed on the way.

SHELL := /bin/bash
GO ?= go
PORT ?= 6379
FUZZTIME ?= 30s

# Local images only: the test reaper's image cannot be pulled.
export TESTCONTAINERS_RYUK_DISABLED := true
export CGO_ENABLED := 1

# apt-get as root, or through sudo.
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

.PHONY: help build rls run test unit integration lint images emulation dist release release-dry publish push deps fuzz soak bench callgrind callgrind-lua redis-server clean generate lua demo charts chromium clients

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

build: ## build build/ratelimit.so
	./build.sh

# Debian's redis-server (with redis-benchmark), installed when missing; the
# service it ships is not started (RUNLEVEL=1).
redis-server:
	@command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null || { \
	  echo "installing Debian's redis-server"; \
	  $(SUDO) apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 apt-get install -y -qq redis-server redis-tools >/dev/null; }

# Debian's chromium, for the demo page's browser test; installed when missing.
chromium:
	@command -v chromium >/dev/null || { \
	  echo "installing Debian's chromium (the demo page's browser test)"; \
	  $(SUDO) apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

demo: build build/clockshift.so redis-server ## serve the simulator page on 127.0.0.1:8080 (DEMO_ADDR overrides) with a redis-server of its own
	$(GO) run ./cmd/demo

charts: build build/clockshift.so redis-server ## write docs/charts/<pattern>.svg: every algorithm under each traffic pattern, from the module
	$(GO) run ./cmd/demo -charts docs/charts

.PHONY: screenshots
screenshots: build build/clockshift.so redis-server chromium ## write docs/simulator-*.png: the demo page as its browser tests check it
	DEMO_SCREENSHOTS=$(CURDIR)/docs RATELIMIT_FULL_TESTS=1 $(GO) test ./cmd/demo -count=1 -run 'TestPageInChromium|TestPageAddress|TestPageRetriesAndClients'

run: build redis-server ## build, then serve the module on 127.0.0.1:$(PORT) in the foreground
	@echo "serving ratelimit on 127.0.0.1:$(PORT); in another terminal try:"
	@echo "  redis-cli -p $(PORT) GCRA.THROTTLE user123 15 30 60"
	redis-server --bind 127.0.0.1 --port $(PORT) --save '' --appendonly no \
	  --loadmodule $(CURDIR)/build/ratelimit.so

rls: ## build the Envoy rate limit service: build/rls (see docs/rls.md)
	cd rls && $(GO) build -o ../build/rls ./cmd/rls

test: deps emulation images build lint unit integration ## run every test: lint, unit and fuzz seeds, the demo in Chromium, integration on all servers, the release files and images

# The Go modules: the library (what users get); prom, its Prometheus
# adapter (client_golang only for those who import it); rls, the Envoy rate
# limit service (gRPC and go-control-plane only for those who run it); the
# examples; the benchmarks; the integration tests (testcontainers and moby
# stay out of users' module graphs); and the release tool (golang.org/x/mod).
MODULES := . prom rls examples bench integration release
STATICCHECK := $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2

deps: ## download the Go modules and the linter (images/build.sh installs debootstrap itself)
	for m in $(MODULES); do (cd $$m && $(GO) mod download) || exit 1; done
	$(STATICCHECK) -version

lint: build/cref.so ## go vet, staticcheck, gofmt; the benchmark's C reference compiles without warnings
	for m in $(MODULES); do (cd $$m && $(GO) vet ./... && $(STATICCHECK) ./...) || exit 1; done
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi

unit: build build/clockshift.so redis-server chromium ## unit tests, examples and fuzz seeds, and the demo's (a redis-server of its own, the page in headless Chromium)
	for m in . prom rls examples release; do (cd $$m && RATELIMIT_FULL_TESTS=1 $(GO) test -count=1 ./...) || exit 1; done

integration: build build/clockshift.so clients ## the module in Redis 7.0, Redis 8.0 and Valkey 8.1 containers; the release files, the images, installing from tags, docs/clients.md's examples
	cd integration && $(GO) test -count=1 -timeout 45m .

# A test tool: preloaded into a server, it steps the server's wall clock by
# what a file says (the clock-step tests).
build/clockshift.so: integration/clockshift/clockshift.c
	@mkdir -p build
	gcc -O2 -Wall -Wextra -Werror -shared -fPIC -o $@ integration/clockshift/clockshift.c -ldl
	chmod 755 $@

# The images make images builds and make publish pushes:
# $(IMAGE_REPO)/ratelimit-NAME for each NAME of IMAGES (deploy/ and the
# docs name them; a test checks they agree).
IMAGE_REPO ?= ghcr.io/seed-6b3823f5
IMAGES := redis valkey module rls
export IMAGE_REPO

emulation: ## let this machine run the other architecture's programs (qemu-user-static in binfmt_misc), so that make images builds the server images for linux/amd64 and linux/arm64; where the kernel refuses, it says so and goes on
	./images/emulation.sh

images: dist ## build the images from Debian's packages (no registry): the test servers, and ghcr.io/seed-6b3823f5/ratelimit-redis, -valkey, -module, -rls from build/dist (module and rls for linux/amd64 and arm64, the servers for each this machine runs)
	./images/build.sh

dist: deps ## write build/dist: the module for linux-amd64 and -arm64 (glibc 2.17 and later), rls for both, the Lua library and scripts, the SBOM, SHA256SUMS
	./release/dist.sh

release: ## tag vVERSION, prom/vVERSION and rls/vVERSION locally (make release VERSION=X.Y.Z; pushes nothing); pushing the tags starts the release workflow
	./release/release.sh $(VERSION)

release-dry: dist images ## what the release workflow publishes, published nowhere: build/publish/ (the files attached, the release's text, the image references) and the commands it would run
	./release/publish.sh --dry-run

publish: ## publish release vVERSION from make dist and make images: push the images, create the GitHub release (REGISTRY_USER, REGISTRY_PASSWORD, GH_TOKEN); the release workflow runs it
	./release/publish.sh

push: ## push the images make images built to REGISTRY (default IMAGE_REPO, ghcr.io/seed-6b3823f5): each architecture as VERSION-ARCH, then VERSION and latest as lists of them
	./images/push.sh

# Debian's Python and Node clients, for docs/clients.md's examples.
clients:
	@{ [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import redis' 2>/dev/null && command -v node >/dev/null && \
	  [ -f /usr/share/nodejs/redis/package.json ]; } || { \
	  echo "installing Debian's python3-redis and node-redis (docs/clients.md's examples)"; \
	  $(SUDO) apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-redis node-redis $$(command -v node >/dev/null || echo nodejs) >/dev/null; }

bench: build build/cref.so redis-server ## measure every command beside INCR, SET, Lua and a C reference (GCRA also on Redis 8.0 and Valkey 8.1), and the Envoy rate limit service beside envoyproxy/ratelimit; writes bench/BENCHMARKS.md, bench/chart.svg, bench/BENCHMARKS-RLS.md and bench/BENCHMARKS-LEASED.md
	./images/build.sh servers
	cd bench && $(GO) build -o ../build/bench . && $(GO) build -o ../build/bench-rls ./rls && $(GO) build -o ../build/bench-leased ./leased
	./build/bench -images local/redis:8.0,local/valkey:8.1
	./build/bench-rls
	./build/bench-leased

# The build make callgrind compares with: the module as it was at
# BASELINE_REF (a git revision), built from git's copy of it. The default is
# main as it landed before issue 44's work (5eb68a7): what that work must
# not cost more instructions per call than.
BASELINE_REF ?= 5eb68a7
BASELINE := build/baseline-$(BASELINE_REF)
$(BASELINE)/build/ratelimit.so:
	rm -rf $(BASELINE) && mkdir -p $(BASELINE)
	git archive $(BASELINE_REF) | tar -x -C $(BASELINE)
	cd $(BASELINE) && ./build.sh

callgrind: build build/cref.so $(BASELINE)/build/ratelimit.so redis-server ## instructions per call under valgrind: GCRA.THROTTLE, the C reference, SW.HIT, RL.ALL, FW.HIT, each beside BASELINE_REF's build (default 5eb68a7); FW.HIT with SPREAD, with SPAN and with LIMITS
	@command -v valgrind >/dev/null || { $(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null; }
	BASELINE_SO=$(CURDIR)/$(BASELINE)/build/ratelimit.so bench/callgrind.sh

callgrind-lua: redis-server ## the Lua engine's instructions per call under valgrind: each FCALL beside its recipe (and redis_rate's allowN once make bench has run)
	@command -v valgrind >/dev/null || { $(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null; }
	bench/callgrind-lua.sh

# The benchmark's C reference: GCRA.THROTTLE's server calls with no Go.
build/cref.so: bench/cref/cref.c module/rmapi.h
	@mkdir -p build
	gcc -O2 -g -Wall -Wextra -Werror -shared -fPIC -Imodule -o $@ bench/cref/cref.c
	chmod 755 $@

soak: build ## ten million calls per server, RSS and the Go runtime's share sampled (not part of make test)
	cd integration && SOAK=1 $(GO) test -count=1 -v -timeout 60m -run 'TestSoak' . | grep -E 'soak_test|^(---|ok|FAIL)'

generate: ## write the files made from the command table (internal/spec): module/*_gen.*, internal/engine/params_gen.go, lua/ratelimit.lua (unit tests check they match)
	$(GO) generate ./module ./internal/engine ./lua

lua: ## write each command's EVAL script to build/lua/<command>.lua, for other languages (lua/ratelimit.lua is the FUNCTION library)
	$(GO) run ./cmd/gen -scripts build/lua

fuzz: ## run every fuzz target for FUZZTIME (default 30s) each
	@for p in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list 'Fuzz.*' $$p | grep ^Fuzz); do \
	    echo "fuzz $$p $$f"; $(GO) test $$p -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) || exit 1; \
	  done; \
	done

clean: ## remove build output
	rm -rf build
