// DeviceLoader: a DataLoader whose batches arrive on the training device. When the loader pins its
// batches (LoaderOptions::pin_memory) and the device has copy streams (a GPU), batch k+1 is uploaded on a
// copy stream while batch k computes; otherwise each batch is copied when it is taken (Tensor::to), and
// on the CPU it passes through untouched.
#pragma once

#include <exception>
#include <memory>
#include <optional>

#include "opsnn/core/device.h"
#include "opsnn/core/storage.h"
#include "opsnn/data/loader.h"

namespace opsnn::data {

class DeviceLoader {
 public:
  // `copy_stream` replaces the device's own copy stream (tests drive the asynchronous path with one of
  // their own); without it, uploads are asynchronous exactly when `loader` pins its batches and the
  // device provides a copy stream.
  DeviceLoader(std::unique_ptr<DataLoader> loader, Device device, std::unique_ptr<CopyStream> copy_stream = nullptr);
  ~DeviceLoader();  // orders the release of an upload still in flight after its copies
  DeviceLoader(const DeviceLoader&) = delete;
  DeviceLoader& operator=(const DeviceLoader&) = delete;

  const DataLoader& host() const { return *host_; }
  Device device() const { return device_; }
  bool asynchronous() const { return copy_stream_ != nullptr; }
  int64_t batches_per_epoch() const { return host_->batches_per_epoch(); }

  // DataLoader::next with the batch on the device (Batch::buffer unset). Asynchronous uploads: compute
  // queued after this call sees the whole batch; an error producing a batch surfaces when it is taken.
  std::optional<Batch> next();
  // The position of the batch next() returns next (with an upload in flight, the host loader is one
  // batch further on): what a checkpoint records.
  LoaderPosition position() const;
  // DataLoader::seek; an upload in flight is dropped.
  void seek(LoaderPosition position);

 private:
  // A batch taken from the host loader, its copies queued, not yet handed out.
  struct Upload {
    LoaderPosition position;              // where the host loader stood before taking it
    std::optional<Batch> batch;           // on the device; empty for an epoch's end or an error
    std::shared_ptr<DeviceEvent> copied;  // after the batch's copies
    std::exception_ptr error;             // thrown producing the batch, rethrown when it is taken
  };
  Upload start_upload();
  void drop_upload();

  std::unique_ptr<DataLoader> host_;
  Device device_;
  std::unique_ptr<CopyStream> copy_stream_;  // null: synchronous copies
  std::optional<Upload> ahead_;              // batch k+1 while the trainer computes batch k
};

}  // namespace opsnn::data
