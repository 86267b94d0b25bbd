// A gRPC call as Inference (server/serving/inference.h) sees it, for the gRPC front ends.
#pragma once

#include <grpcpp/server_context.h>

#include "server/serving/inference.h"

namespace ts::server {

// The call's `authorization` metadata, its deadline and its cancellation. The context must
// outlive every use of the result's `cancelled`.
CallContext CallFrom(grpc::CallbackServerContext& context);

// Finishes a unary call at once with `status` (ToGrpcStatus); the response is filled when OK.
grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext& context,
                                      const absl::Status& status);

}  // namespace ts::server
