# gpool: every target runs setup and the build itself, so each is one command on a fresh machine.
JOBS ?= 2
BUILD ?= build
ASAN_BUILD ?= build-asan
CMAKE_FLAGS ?=
# Release by default: CI builds everything twice on 2 cores, and debug info doubles link time.
# Use BUILD_TYPE=RelWithDebInfo (or Debug) when you need a debugger.
BUILD_TYPE ?= Release
# Unity builds (docs/ci.md, "Why it is built this way"): CMake compiles each target's sources in batches of 8 per
# translation unit, so the headers' code (CLI11, fmt, json, gtest, protobuf) is generated once per
# batch: about half the compile CPU of a clean tree, in both trees. On, so `make` builds what CI
# builds (a fresh-clone .ci/run passed with both on: docs/ci.md). Its price is in incremental
# builds: an edited source recompiles its batch. For an edit-compile loop use UNITY=OFF (switches
# an existing tree), or a plain `cmake -S . -B dir` (off unless -DGPOOL_UNITY=ON). The
# unity_clashes test checks the names in every tree. ASAN_UNITY: the same for the sanitizer tree.
UNITY ?= ON
ASAN_UNITY ?= ON

.PHONY: all setup build test demo bench asan test-asan fuzz clean

all: build

setup:
	@scripts/setup.sh

$(BUILD)/build.ninja: | setup
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DGPOOL_UNITY=$(UNITY) $(CMAKE_FLAGS)

# An existing tree configured with the other UNITY value is switched before building.
unity_sync = grep -qx 'GPOOL_UNITY:BOOL=$(2)' $(1)/CMakeCache.txt || cmake -S . -B $(1) -DGPOOL_UNITY=$(2)

build: setup $(BUILD)/build.ninja
	@$(call unity_sync,$(BUILD),$(UNITY))
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

demo: build
	scripts/demo.sh $(BUILD)

bench: build
	scripts/bench.sh $(BUILD)

$(ASAN_BUILD)/build.ninja: | setup
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=None -DGPOOL_SANITIZE=ON -DGPOOL_BENCH=OFF \
	  -DCMAKE_CXX_FLAGS="-O1 -g1" -DGPOOL_UNITY=$(ASAN_UNITY) \
	  -DGPOOL_CUDA_SAMPLES_FROM=$(CURDIR)/$(BUILD)/tests/remote/cuda $(CMAKE_FLAGS)

# The sanitizer tree copies the Release tree's nvcc samples when they are built and current
# (tests/remote/CMakeLists.txt), and compiles them itself otherwise.
# The sanitizer build alone (.ci/run builds it at low priority while the Release tests run).
asan: setup $(ASAN_BUILD)/build.ninja
	@$(call unity_sync,$(ASAN_BUILD),$(ASAN_UNITY))
	cmake --build $(ASAN_BUILD) -j $(JOBS)

# The whole test suite under AddressSanitizer and UndefinedBehaviorSanitizer.
# verify_asan_link_order=0: the IB tests run gpool with ibsim's umad2sim shim in LD_PRELOAD ahead of
# the ASan runtime (as OpenSM's tools are run); tests/asan.supp silences the shim's own overflow.
# The Release run's per-test times (when there is one and this tree has none) let ctest start the
# longest tests first instead of last, so the two -j slots finish together.
test-asan: asan
	@if [ -f $(BUILD)/Testing/Temporary/CTestCostData.txt ] && \
	    [ ! -f $(ASAN_BUILD)/Testing/Temporary/CTestCostData.txt ]; then \
	  mkdir -p $(ASAN_BUILD)/Testing/Temporary && \
	  cp $(BUILD)/Testing/Temporary/CTestCostData.txt $(ASAN_BUILD)/Testing/Temporary/; fi
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:verify_asan_link_order=0:suppressions=$(CURDIR)/tests/asan.supp \
	  UBSAN_OPTIONS=print_stacktrace=1 \
	  LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp \
	  ctest --output-on-failure -j $(JOBS)

# libFuzzer targets for the parsers and decoders (clang).
fuzz:
	@scripts/setup.sh fuzz
	cmake -S . -B build-fuzz -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
	  -DGPOOL_FUZZ=ON -DGPOOL_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build build-fuzz -j $(JOBS)
	scripts/fuzz.sh build-fuzz

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) build-fuzz
