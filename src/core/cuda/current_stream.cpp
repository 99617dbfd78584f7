#include "core/cuda/current_stream.h"

namespace opsnn::cuda {
namespace {
thread_local cudaStream_t t_current_stream = nullptr;
}  // namespace

cudaStream_t current_stream() { return t_current_stream; }

StreamScope::StreamScope(cudaStream_t stream) : previous_(t_current_stream) { t_current_stream = stream; }
StreamScope::~StreamScope() { t_current_stream = previous_; }

}  // namespace opsnn::cuda
