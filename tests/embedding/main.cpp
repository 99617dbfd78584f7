// An embedding program: loads a training config, trains a few steps through opsnn::train::Trainer, saves a
// checkpoint and prints its folder. Built against the installed opsnn package by the [embed] test.
#include <opsnn/opsnn.h>  // every public header, and the built-ins registered

#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s CONFIG RUN_DIR STEPS\n", argv[0]);
    return 2;
  }
  try {
    const long steps = std::stol(argv[3]);
    opsnn::train::TrainConfig config = opsnn::train::load_config(argv[1]);
    opsnn::train::Trainer trainer(config, {.out_dir = argv[2], .show_progress = false});
    double loss = trainer.train_steps(steps);
    std::filesystem::path checkpoint = trainer.save_checkpoint();
    std::printf("trained %lld steps, mean loss %.4f\ncheckpoint %s\n", static_cast<long long>(trainer.step()), loss,
                checkpoint.c_str());
    return trainer.step() == steps ? 0 : 1;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "opsnn-embedding: %s\n", error.what());
    return 1;
  }
}
