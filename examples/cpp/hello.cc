// The README's first example: a linear layer and a softmax on the CPU device, then the error a
// shape mistake gives at the call site.
#include <tensorwire/tensorwire.h>

#include <iostream>

int main() {
  tw::manual_seed(0);
  tw::Tensor x = tw::randn({64, 784});         // a batch of 64 inputs
  tw::Tensor w = tw::randn({784, 10}) * 0.01;  // weights of a linear layer
  tw::Tensor probs = x.matmul(w).softmax(-1);  // [64, 10], each row sums to 1
  std::cout << probs.argmax(1).slice(0, 0, 8) << "\n" << probs.sum(1).mean() << "\n";
  try {
    x.matmul(w.t());
  } catch (const tw::Error& e) {
    std::cout << e.what() << "\n";
    return 0;
  }
  return 1;  // the mistake above must throw
}
