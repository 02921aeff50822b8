// gpulab-save-loop DIR [--direct]: saves the user files GPU Lab writes, in a loop, forever, so that
// test_kill9 can SIGKILL it at random moments and check that every file still parses:
//   DIR/progress.json  through course::ProgressStore (QSaveFile), the app's only user file today;
//   DIR/model.gpulab   through nn::save (tmp + fsync + rename), a 256 KiB state dict whose values
//                      are all equal to the iteration number, so a torn mix of two saves is visible.
// Prints "ready" once both files exist. --direct writes the state dict in place, in small chunks,
// without tmp/rename: the unsafe way, used by the test to prove that it does detect torn files.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "app/course/progress_store.h"
#include "engine/autograd/grad_mode.h"
#include "engine/nn/layers.h"
#include "engine/nn/state_dict.h"

using namespace gpulab;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [--direct]\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const bool direct = argc > 2 && std::string(argv[2]) == "--direct";
  course::ProgressStore progress(QString::fromStdString(dir + "/progress.json"));
  nn::Linear model(256, 255);  // 256*255 + 255 floats = 256 KiB
  const std::string modelPath = dir + "/model.gpulab";
  NoGradGuard noGrad;  // fill_ on parameters, like `with torch.no_grad(): p.fill_(i)`
  for (long i = 0;; ++i) {
    for (auto& [name, p] : model.named_parameters()) p.fill_(static_cast<double>(i % 1000));
    if (direct) {
      const std::string bytes = nn::serializeStateDict(model.state_dict());
      std::ofstream os(modelPath, std::ios::binary | std::ios::trunc);
      for (std::size_t at = 0; at < bytes.size(); at += 4096) {
        os.write(bytes.data() + at, static_cast<std::streamsize>(std::min<std::size_t>(4096, bytes.size() - at)));
        os.flush();
        ::usleep(50);
      }
    } else {
      nn::save(model.state_dict(), modelPath);
    }
    progress.setAnswer(QStringLiteral("lesson-%1").arg(i % 7), static_cast<int>(i % 3), static_cast<int>(i));
    progress.setCompleted(QStringLiteral("lesson-%1").arg(i % 5), i % 2 == 0);
    if (i == 0) {
      std::puts("ready");
      std::fflush(stdout);
    }
  }
}
