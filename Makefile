# Thin wrapper over CMake + Ninja. `make demo` and `make test` do all set-up on a
# fresh Debian 12 machine (as root): packages, configure, build, run.
BUILD ?= build
JOBS ?= $(shell nproc)
# The PyPI venv of test oracles and peers (scripts/setup_venv.sh); TITAN_VENV overrides.
VENV ?= $(if $(TITAN_VENV),$(TITAN_VENV),$(CURDIR)/.venv)
DEBS := cmake ninja-build g++ pkg-config libgtest-dev libgmock-dev libbenchmark-dev \
        nlohmann-json3-dev libtomlplusplus-dev libcli11-dev libfmt-dev libopenblas-dev \
        libpcre2-dev libutf8proc-dev libsentencepiece-dev wamerican \
        python3 python3-torch python3-numpy python3-venv python3-matplotlib \
        libopenmpi-dev openmpi-bin libcpp-httplib-dev libsqlite3-dev \
        clang libclang-rt-14-dev

.PHONY: all deps venv configure build demo test bench fuzz fuzz-build clean

all: build

deps:
	@missing=""; for p in $(DEBS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  if [ "$$(id -u)" != 0 ]; then echo "error: missing Debian packages:$$missing (run as root or install them)"; exit 2; fi; \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing; \
	fi

$(BUILD)/build.ninja: | deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DTITAN_VENV=$(VENV)

configure: deps $(BUILD)/build.ninja

build: configure
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	./scripts/demo.sh

venv:
	./scripts/setup_venv.sh $(VENV)

test: build venv
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900

bench: build
	./bench/run_all.sh

# libFuzzer targets (tests/fuzz/): clang, ASan + UBSan, in their own build folder so
# that the normal build stays GCC. `make fuzz` runs each for FUZZ_SECONDS.
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 600

$(FUZZ_BUILD)/build.ninja: | deps
	cmake -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=clang \
	  -DCMAKE_CXX_COMPILER=clang++ -DTITAN_FUZZ=ON

fuzz-build: $(FUZZ_BUILD)/build.ninja
	cmake --build $(FUZZ_BUILD) -j $(JOBS)

fuzz: fuzz-build
	FUZZ_BUILD=$(FUZZ_BUILD) FUZZ_SECONDS=$(FUZZ_SECONDS) ./scripts/fuzz.sh

clean:
	rm -rf $(BUILD) $(FUZZ_BUILD)
