# torchtpu developer entry points.
#   make demo   - set everything up, run the MLP demo on the vTPU
#   make test   - set everything up, run every test (C under ASan/UBSan, Python)
PYTHON ?= python3
BUILD  := build
CORE_DIRS := csrc/base csrc/ir csrc/compiler csrc/runtime csrc/vtpu
CORE_SRCS := $(foreach d,$(CORE_DIRS),$(wildcard $(d)/*.c))
CORE_HDRS := $(wildcard csrc/include/tpu/*.h) $(foreach d,$(CORE_DIRS),$(wildcard $(d)/*.h))
CTESTS    := $(patsubst tests/c/%.c,$(BUILD)/ctest/%,$(wildcard tests/c/test_*.c))
CFLAGS_COMMON := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Icsrc/include -Icsrc -pthread
SAN := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
CFLAGS_DEBUG := $(CFLAGS_COMMON) -O1 -g $(SAN)

.PHONY: setup build demo test test-c test-py test-tsan bench ops clean

setup:
	bash tools/setup.sh

build:
	$(PYTHON) -m pip install --no-build-isolation --no-deps -e . -q

demo: setup
	$(PYTHON) examples/mlp_demo.py

test: setup test-c test-tsan test-py

$(BUILD)/ctest/libcore.a: $(CORE_SRCS) $(CORE_HDRS)
	@mkdir -p $(BUILD)/ctest/obj
	@set -e; for f in $(CORE_SRCS); do \
	  o=$(BUILD)/ctest/obj/$$(echo $$f | tr / _).o; \
	  $(CC) $(CFLAGS_DEBUG) -c $$f -o $$o; done
	@rm -f $@ && ar rcs $@ $(BUILD)/ctest/obj/*.o

$(BUILD)/ctest/%: tests/c/%.c tests/c/harness.h $(BUILD)/ctest/libcore.a
	$(CC) $(CFLAGS_DEBUG) $< $(BUILD)/ctest/libcore.a -o $@ -ldl -lm

test-c: $(CTESTS)
	@set -e; for t in $(CTESTS); do echo "== $$t"; \
	  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  TPU_VMATH_TEST_STRIDE=$${TPU_VMATH_TEST_STRIDE:-1009} $$t; done

# the stream/worker tests again under ThreadSanitizer
TSAN := -fsanitize=thread -fno-omit-frame-pointer
$(BUILD)/tsan/libcore.a: $(CORE_SRCS) $(CORE_HDRS)
	@mkdir -p $(BUILD)/tsan/obj
	@set -e; for f in $(CORE_SRCS); do \
	  o=$(BUILD)/tsan/obj/$$(echo $$f | tr / _).o; \
	  $(CC) $(CFLAGS_COMMON) -O1 -g $(TSAN) -c $$f -o $$o; done
	@rm -f $@ && ar rcs $@ $(BUILD)/tsan/obj/*.o

$(BUILD)/tsan/test_runtime: tests/c/test_runtime.c tests/c/harness.h $(BUILD)/tsan/libcore.a
	$(CC) $(CFLAGS_COMMON) -O1 -g $(TSAN) $< $(BUILD)/tsan/libcore.a -o $@ -ldl -lm

test-tsan: $(BUILD)/tsan/test_runtime
	TSAN_OPTIONS=halt_on_error=1 $(BUILD)/tsan/test_runtime

test-py:
	$(PYTHON) -m pytest -q tests/python

# the full OpInfo sweep (float32 + bfloat16, every sample; a few minutes on
# 2 cores): regenerates docs/ops.md and the expected-failure list CI checks
ops: setup
	$(PYTHON) -m tests.opinfo.runner --out docs/ops.md --dtypes float32,bfloat16 --jobs 2 \
	  --snapshot --write-expected tests/opinfo/expected_failures.txt

bench: setup
	$(PYTHON) bench/run_all.py

clean:
	rm -rf $(BUILD) python/torchtpu/*.so *.egg-info python/*.egg-info
