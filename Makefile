# Developer entry points. CMake + Ninja do the real work; this file only strings the steps
# together. Configuring happens once per build folder (Ninja re-runs CMake by itself when a
# CMakeLists.txt changes), so re-running make goes straight to the incremental build.
#   make run     make test     make bench     make bench-train     make bench-remote
#   make bench-graph
#   make asan    make format   make clean

BUILD      ?= build
ASAN_BUILD ?= build-asan
JOBS       ?= $(shell nproc)
# Tests run two at a time: each test may itself use every core through the intra-op pool.
TEST_JOBS  ?= 2
# Seconds a single test may run (a default: a test's own TIMEOUT property takes precedence).
TEST_TIMEOUT ?= 300
# What `make run` runs: the training example (a CNN on handwritten digits, trained on a remote
# device served in-process; apps/train_digits.cc).
RUN_APP    ?= apps/train_digits

.PHONY: all build run test bench bench-train bench-remote bench-graph asan format clean bootstrap
.DEFAULT_GOAL := build
all: build

bootstrap:
	@scripts/bootstrap.sh

# Order-only prerequisite: bootstrap runs first but never makes the configure step out of date.
$(BUILD)/build.ninja: | bootstrap
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release

build: $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

run: build
	./$(BUILD)/$(RUN_APP)

test: build
	ctest --test-dir $(BUILD) --output-on-failure --no-tests=error -j $(TEST_JOBS) \
	  --timeout $(TEST_TIMEOUT)

bench:
	bash bench/compare_torch.sh

bench-train:
	bash bench/compare_train.sh

bench-remote: build
	cmake --build $(BUILD) --target tw_bench_remote -j $(JOBS)
	./$(BUILD)/bench/tw_bench_remote

bench-graph: build
	cmake --build $(BUILD) --target tw_bench_graph -j $(JOBS)
	./$(BUILD)/bench/tw_bench_graph

$(ASAN_BUILD)/build.ninja: | bootstrap
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTW_SANITIZE=ON \
	  -DTW_BUILD_BENCH=OFF

asan: $(ASAN_BUILD)/build.ninja
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --test-dir $(ASAN_BUILD) --output-on-failure --no-tests=error -j $(TEST_JOBS) \
	  --timeout $(TEST_TIMEOUT)

FORMAT_DIRS := src include tests bench apps
format:
	@command -v clang-format >/dev/null || { \
	  echo "format: clang-format not found; as root run: apt-get install -y clang-format" >&2; exit 1; }
	find $(FORMAT_DIRS) -type f \( -name '*.cc' -o -name '*.h' \) -print0 | xargs -0 -r clang-format -i

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
