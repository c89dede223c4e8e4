// `make run` until the training example exists: a short tour of the Tensor API on the CPU
// device, printing what each step computes.
#include <chrono>
#include <cstdio>
#include <iostream>

#include "tensorwire/tensorwire.h"

namespace {
void section(const char* title) { std::cout << "\n== " << title << " ==\n"; }
}  // namespace

int main() {
  try {
    tw::Device cpu = tw::Device::cpu();
    std::cout << "tensorwire showcase on device '" << cpu.str() << "' with "
              << tw::get_num_threads() << " intra-op threads\n";

    section("creation");
    tw::Tensor a = tw::arange(0, 6).reshape({2, 3}).to(tw::kF32);
    tw::Tensor b = tw::ones({2, 3});
    std::cout << "a = " << a << "\nb = " << b << "\n";

    section("elementwise with broadcasting");
    tw::Tensor row = tw::tensor<float>({10, 20, 30});
    std::cout << "a + row = " << (a + row) << "\n";
    std::cout << "exp(a) = " << a.exp() << "\n";
    std::cout << "a > 2 = " << (a > 2) << "\n";

    section("reductions");
    std::cout << "a.sum() = " << a.sum() << "\na.mean(1) = " << a.mean(1)
              << "\na.argmax(1) = " << a.argmax(1) << "\n";

    section("matmul and movement (views)");
    tw::Tensor c = a.matmul(a.t());
    std::cout << "a @ a.T = " << c << "\n";
    std::cout << "a[:, ::2] = " << a.slice(1, 0, 3, 2) << "\n";
    std::cout << "cat([a, b], 0) = " << tw::cat({a, b}, 0) << "\n";

    section("neural");
    tw::manual_seed(0);
    tw::Tensor x = tw::randn({1, 1, 4, 4});
    tw::Tensor w = tw::ones({1, 1, 3, 3}) / 9.0;
    std::cout << "conv2d(x, box blur, padding 1) = " << tw::conv2d(x, w, {}, {1, 1}, {1, 1})
              << "\n";
    std::cout << "softmax(a, -1) = " << a.softmax(-1) << "\n";

    section("errors are raised at the call site");
    try {
      tw::Tensor bad = a.matmul(tw::ones({4, 5}));
    } catch (const tw::Error& e) {
      std::cout << "caught: " << e.what() << "\n";
    }

    section("a bigger job");
    auto t0 = std::chrono::steady_clock::now();
    tw::Tensor m = tw::randn({1024, 1024});
    tw::Tensor p = m.matmul(m);
    double s = p.sum().item<float>();
    double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("1024x1024 randn, matmul and sum: %.1f ms (checksum %.3f)\n", ms, s);
  } catch (const tw::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
