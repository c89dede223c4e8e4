# Developer entry points. CMake + Ninja do the real work; this file only strings the steps
# together. Configuring happens once per build folder (Ninja re-runs CMake by itself when a
# CMakeLists.txt changes), so re-running make goes straight to the incremental build.
#   make run     make test     make bench     make bench-train     make bench-remote  make bench-net
#   make asan    make tsan    make fuzz     make format   make format-check   make clean
#   make install PREFIX=/opt/tw (cmake --install: library, headers, programs, CMake and
#   pkg-config packages, systemd unit)   make install-python (the Python package into the
#   user's site-packages)   make bench-python   make bench-graph
#   make bench-lm    make bench-lowp    make bench-split    make chaos    make diff-fuzz (random programs against PyTorch, 10 minutes)

BUILD      ?= build
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
FUZZ_BUILD ?= build-fuzz
# Seconds each fuzz target runs (tests/fuzz/README.md); .ci/run uses a short run.
FUZZ_SECONDS ?= 60
# libFuzzer comes with clang; clang-14 with libstdc++ 12 rejects std::views and
# std::source_location, so the fuzz build uses clang-16.
FUZZ_CXX   ?= clang++-16
JOBS       ?= $(shell nproc)
# Tests run two at a time: each test may itself use every core through the intra-op pool.
TEST_JOBS  ?= 2
# Seconds a single test may run (a default: a test's own TIMEOUT property takes precedence).
TEST_TIMEOUT ?= 300
# What `make run` builds and runs: the digits CNN, then a short run of the character-level GPT
# with a sample, each on a remote device its program serves in-process (apps/train_digits.cc,
# apps/train_lm.cc). It builds these targets only (not the tests and benchmarks), after
# installing only the packages they need (scripts/bootstrap.sh --run).
RUN_TARGETS ?= train_digits train_lm
RUN_LM_FLAGS ?= --steps 60 --layers 2 --embd 128 --report-every 20 --sample 160 --target 0
# The interpreter the Python module is built and tested for (CMake's TW_PYTHON has the same default).
PYTHON     ?= /usr/bin/python3
# Where `make install` installs (DESTDIR, as usual, stages it elsewhere).
PREFIX     ?= /usr/local

.PHONY: all build reconfigure-if-new run test diff-fuzz bench bench-train chaos bench-remote bench-graph bench-python bench-onnx bench-net bench-split bench-lm bench-lowp install install-python \
        asan tsan fuzz \
        format format-check clean bootstrap
.DEFAULT_GOAL := build
all: build

# The packages: every one the build and the tests use (make build, make test, ...), or with
# BOOTSTRAP_SET=--run only those `make run` needs. A stamp records when it installed anything, so
# that the next build configures again and finds what came (libtorch after make run, say).
BOOTSTRAP_SET ?=
bootstrap:
	@TW_BOOTSTRAP_STAMP=$(BUILD)/.bootstrap-installed scripts/bootstrap.sh $(BOOTSTRAP_SET)

# Configuring the first time installs what is missing first. An existing build is not
# bootstrapped again by what only needs the build (make install).
$(BUILD)/build.ninja:
	@TW_BOOTSTRAP_STAMP=$(BUILD)/.bootstrap-installed scripts/bootstrap.sh $(BOOTSTRAP_SET)
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release

# Packages installed since the build was configured: configure again (CMake then finds them).
reconfigure-if-new: $(BUILD)/build.ninja
	@if [ $(BUILD)/.bootstrap-installed -nt $(BUILD)/CMakeCache.txt ]; then \
	  cmake -S . -B $(BUILD); fi

build: bootstrap reconfigure-if-new
	cmake --build $(BUILD) -j $(JOBS)

run: BOOTSTRAP_SET = --run
run: reconfigure-if-new
	@echo "make run: building $(RUN_TARGETS) only ($(JOBS) jobs; a few minutes the first time," \
	  "seconds after that); make test builds the rest"
	@start=$$(date +%s); cmake --build $(BUILD) -j $(JOBS) --target $(RUN_TARGETS) && \
	  echo "make run: built in $$(( $$(date +%s) - start )) s"
	./$(BUILD)/apps/train_digits
	./$(BUILD)/apps/train_lm $(RUN_LM_FLAGS)

test: build
	ctest --test-dir $(BUILD) --output-on-failure --no-tests=error -j $(TEST_JOBS) \
	  --timeout $(TEST_TIMEOUT)

bench:
	bash bench/compare_torch.sh

bench-train:
	bash bench/compare_train.sh

# Cuts, kill -9 with failover, checkpoint cost, crash safety (bench/chaos.cc; issue 35's table).
chaos: build
	cmake --build $(BUILD) --target tw_bench_chaos -j $(JOBS)
	./$(BUILD)/bench/tw_bench_chaos

bench-remote: build
	cmake --build $(BUILD) --target tw_bench_remote -j $(JOBS)
	./$(BUILD)/bench/tw_bench_remote

# Over a shaped link (network namespaces, tc tbf, a delaying relay; needs root): uploads at
# 100 Mbit/s, compressed and deduplicated, against issue 34's targets (docs/remote.md).
NET_RTT_US ?= 2000
NET_RATE   ?= 100mbit
bench-net: build
	cmake --build $(BUILD) --target tw_bench_net -j $(JOBS)
	# Client, relay and server share this machine's cores: OpenMP threads that spin between
	# kernels (the default) delay the others by scheduler ticks; passive waits stand for the
	# server's own machine (bench/results/net.md, rows T).
	OMP_WAIT_POLICY=$${OMP_WAIT_POLICY:-passive} ./$(BUILD)/bench/tw_bench_net --rtt-us $(NET_RTT_US) --rate $(NET_RATE)

# One model over two servers pinned to a core each (pipeline, tensor parallel, --store) against
# one server (bench/split_bench.cc; SPLIT_FLAGS=--gpt2-small for issue 51's model).
SPLIT_FLAGS ?=
bench-split: build
	cmake --build $(BUILD) --target tw_bench_split -j $(JOBS)
	./$(BUILD)/bench/tw_bench_split $(SPLIT_FLAGS)

# Python vs C++ on remote devices (bench/python_bench.py runs the C++ rows itself).
# Imported ONNX models remote against local (bench/results/onnx_remote.md).
bench-onnx:
	bash bench/onnx_remote.sh

# The character-level GPT against PyTorch: step time, generation, loss agreement (bench/lm_bench.sh).
bench-lm:
	bash bench/lm_bench.sh

# bf16 matmul against f32 and the bf16 FMA peak (bench/lowp_bench.sh; docs/lowp.md).
bench-lowp:
	bash bench/lowp_bench.sh

bench-python: build
	PYTHONPATH=$(BUILD)/python $(PYTHON) bench/python_bench.py --build $(BUILD)

# cmake/install.cmake says what goes where; tests/install checks it.
# Needs the build only: no packages (an existing build is brought up to date, nothing installed
# with apt; a fresh checkout is configured and bootstrapped first).
install: $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)
	cmake --install $(BUILD) --prefix $(PREFIX)

# The installed Python package (CMake component "python": the extension with the library and
# tensorwire-server under tensorwire/lib and tensorwire/bin) into the user's site-packages. In a
# virtual environment, `pip install --no-build-isolation .` does the same (pyproject.toml).
install-python: build
	@site="$$($(PYTHON) -m site --user-site)" && mkdir -p "$$site" && rm -rf "$$site/tensorwire" && \
	  cmake --install $(BUILD) --component python --prefix "$$site" >/dev/null && \
	  echo "install-python: tensorwire installed in $$site (try: $(PYTHON) -c 'import tensorwire')"

bench-graph: build
	cmake --build $(BUILD) --target tw_bench_graph -j $(JOBS)
	./$(BUILD)/bench/tw_bench_graph

# The differential fuzzer against PyTorch (tests/difffuzz/README.md): random programs from seeds
# drawn from the clock for DIFF_FUZZ_MINUTES; prints every failing seed and how to reproduce it.
DIFF_FUZZ_MINUTES ?= 10
diff-fuzz: $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS) --target tw_python_package
	PYTHONPATH=$(BUILD)/python $(PYTHON) tests/difffuzz/diff_fuzz.py --minutes $(DIFF_FUZZ_MINUTES)

# -O1 -g1: ASan's own advice (usable speed, exact line numbers in reports) and half the compile
# time of -O2 -g; asserts stay on. Without the torch backend (a thin layer over the uninstrumented
# libtorch, and its headers are most of a build's time) and the benchmarks.
$(ASAN_BUILD)/build.ninja: | bootstrap
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DTW_SANITIZE=ON -DTW_BUILD_BENCH=OFF \
	  -DTW_WITH_TORCH=OFF

# The sanitised C++ suites. Not the Python tests: an instrumented extension module cannot load
# into Debian's uninstrumented interpreter (it crashes at import unless libasan is preloaded).
# Sanitised suites run several times slower, hence their own time limit.
# intercept_tls_get_addr=0: GCC 12's sanitizer runtime (up to GCC 13 / LLVM 16) takes a dynamic
# TLS block at 16 bytes past a 4 KiB boundary for glibc 2.19's layout and records the two words
# before it as the block's range; a malloc'd block (glibc >= 2.25) lands there by chance, and
# LeakSanitizer's tracer then faults scanning that garbage range at exit ("Tracer caught signal
# 11", "LeakSanitizer has encountered a fatal error"; google/sanitizers#1322). It hit processes
# that load the torch module (tw_test_api about 2 runs in 3). Not intercepting skips recording
# dynamic TLS, so LeakSanitizer does not scan it for roots; static TLS, stacks and globals still are.
ASAN_TEST_TIMEOUT ?= 1800
ASAN_OPTIONS_TESTS = detect_leaks=1:abort_on_error=1:intercept_tls_get_addr=0
# The C++ suites only (ctest's tw_test_*: unit, regress, integration, onnx) and what they run.
ASAN_SUITES = ctest --test-dir $(ASAN_BUILD) -N -R '^tw_test_' | sed -n 's/^ *Test *\#[0-9]*: //p'
asan: $(ASAN_BUILD)/build.ninja
	cmake --build $(ASAN_BUILD) -j $(JOBS) --target $$($(ASAN_SUITES))
	ASAN_OPTIONS=$(ASAN_OPTIONS_TESTS) UBSAN_OPTIONS=print_stacktrace=1 \
	  LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0 \
	  ctest --test-dir $(ASAN_BUILD) --output-on-failure --no-tests=error -j $(TEST_JOBS) \
	  --timeout $(ASAN_TEST_TIMEOUT) -R '^tw_test_'

# ThreadSanitizer over the suites where threads meet: the server, the client and the transports
# (tw_test_server, tw_test_net, tw_test_integration: real servers and clients over every transport).
# Not in .ci/run (it is run before each closing note, its result quoted there): a full
# instrumented build of its own. Debian's libgomp, oneDNN and Gloo are not instrumented, so TSan
# cannot see their synchronisation: tests/tsan.supp lists each suppression with its reason.
TSAN_TARGETS = tw_test_server tw_test_net tw_test_integration
TSAN_OPTIONS_TESTS = suppressions=$(CURDIR)/tests/tsan.supp:halt_on_error=1:second_deadlock_stack=1
$(TSAN_BUILD)/build.ninja: | bootstrap
	cmake -S . -B $(TSAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTW_SANITIZE_THREAD=ON \
	  -DTW_BUILD_BENCH=OFF -DTW_WITH_TORCH=OFF
tsan: $(TSAN_BUILD)/build.ninja
	cmake --build $(TSAN_BUILD) -j $(JOBS) --target $(TSAN_TARGETS)
	TSAN_OPTIONS=$(TSAN_OPTIONS_TESTS) \
	  ctest --test-dir $(TSAN_BUILD) --output-on-failure --no-tests=error -j $(TEST_JOBS) \
	  --timeout $(ASAN_TEST_TIMEOUT) -R '^($(subst $(eval) ,|,$(TSAN_TARGETS)))$$'

# The root CMakeLists.txt requires OpenMP, which clang-16 finds only with its own runtime
# (libomp-16-dev); the fuzz targets compile nothing with OpenMP, so it is pointed at GCC's libgomp,
# the runtime Debian's oneDNN uses anyway. Only tw_fuzz_all is built there: the CPU backend's
# dnnl_util.cc is compiled with -fopenmp and needs omp.h, which clang-16 has only from
# libomp-16-dev, so a plain `ninja` in that build directory fails on it.
FUZZ_OPENMP = -DOpenMP_CXX_FLAGS=-fopenmp=libgomp -DOpenMP_CXX_LIB_NAMES=gomp \
  -DOpenMP_gomp_LIBRARY=$$(g++ -print-file-name=libgomp.so)
$(FUZZ_BUILD)/build.ninja: | bootstrap
	cmake -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_CXX_COMPILER=$(FUZZ_CXX) -DTW_FUZZ=ON -DTW_WITH_TORCH=OFF -DTW_BUILD_TESTS=OFF \
	  -DTW_BUILD_BENCH=OFF $(FUZZ_OPENMP)

fuzz: $(FUZZ_BUILD)/build.ninja
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target tw_fuzz_all
	tests/fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

# The C++ sources clang-format keeps (style in .clang-format; Debian 12's clang-format 14, which
# scripts/bootstrap.sh installs: another version may format a few lines differently).
FORMAT_DIRS := src include tests bench apps python/src
FORMAT_FILES = find $(FORMAT_DIRS) -type f \( -name '*.cc' -o -name '*.h' \) -print0
format: bootstrap
	$(FORMAT_FILES) | xargs -0 -r clang-format -i

# Fails, naming each file and line, when a source differs from what `make format` makes of it
# (.ci/run runs it).
format-check: bootstrap
	@$(FORMAT_FILES) | xargs -0 -r clang-format --dry-run --Werror || { \
	  echo "format-check: the files above are not clang-formatted; run make format" >&2; exit 1; }

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD) $(FUZZ_BUILD)
