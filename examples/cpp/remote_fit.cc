// Fits y = 3x - 1 with a one-unit linear layer trained on a remote device: the data is uploaded
// once, and each step sends ops only (forward, backward, the SGD update); the loss comes back
// at the end. Then checks that the server computes a matmul bit for bit as the local CPU does.
//   remote_fit tcp://127.0.0.1:7070      (a running tensorwire-server)
#include <tensorwire/tensorwire.h>

#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s URL   (a tensorwire-server, e.g. tcp://127.0.0.1:7070)\n",
                 argv[0]);
    return 2;
  }
  try {
    tw::Device dev = tw::Device::remote(argv[1]);
    tw::Tensor x = (tw::arange(0, 32).to(tw::kF32) / 32.0).reshape({32, 1});
    tw::Tensor y = x * 3.0 - 1.0;
    tw::Tensor xr = x.to(dev), yr = y.to(dev);

    tw::manual_seed(0);
    tw::nn::Linear layer(1, 1, true, {dev});
    tw::optim::SGD opt(layer.parameters(), {.lr = 0.5});
    const float first = tw::nn::mse_loss(layer.forward(xr), yr).item<float>();
    for (int step = 0; step < 300; ++step) {
      tw::Tensor loss = tw::nn::mse_loss(layer.forward(xr), yr);
      opt.zero_grad();
      loss.backward();
      opt.step();
    }
    const float last = tw::nn::mse_loss(layer.forward(xr), yr).item<float>();
    std::printf("%s: loss %.6f -> %.6f, w %.4f, b %.4f\n", dev.str().c_str(), first, last,
                layer.weight()->value().item<float>(), layer.bias()->value().item<float>());

    tw::Tensor a = tw::randn({48, 64}), b = tw::randn({64, 32});
    const bool same =
        a.matmul(b).to_vector<float>() == a.to(dev).matmul(b.to(dev)).to_vector<float>();
    std::printf("remote matmul %s the cpu's\n", same ? "equals" : "DIFFERS FROM");
    return last < 1e-4f && same ? 0 : 1;
  } catch (const tw::Error& e) {
    std::fprintf(stderr, "remote_fit: %s\n", e.what());
    return 1;
  }
}
