#include "server/serving/reflection_v1_service.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ts::server {
namespace {

namespace pb = grpc::reflection::v1;
using google::protobuf::DescriptorPool;
using google::protobuf::FileDescriptor;

void SetError(grpc::StatusCode code, std::string message, pb::ServerReflectionResponse* response) {
  response->mutable_error_response()->set_error_code(static_cast<int>(code));
  response->mutable_error_response()->set_error_message(std::move(message));
}

// Adds `file`, then its dependencies, skipping every file already in `sent_files` (gRPC's order:
// the file asked for comes first).
void AddFile(const FileDescriptor* file, std::vector<std::string>* sent_files,
             pb::FileDescriptorResponse* files) {
  if (std::find(sent_files->begin(), sent_files->end(), file->name()) != sent_files->end()) return;
  sent_files->push_back(file->name());
  google::protobuf::FileDescriptorProto proto;
  file->CopyTo(&proto);
  proto.SerializeToString(files->add_file_descriptor_proto());
  for (int i = 0; i < file->dependency_count(); ++i) {
    AddFile(file->dependency(i), sent_files, files);
  }
}

void AnswerFile(const FileDescriptor* file, std::vector<std::string>* sent_files,
                pb::ServerReflectionResponse* response) {
  AddFile(file, sent_files, response->mutable_file_descriptor_response());
}

class ReflectionStream final
    : public grpc::ServerBidiReactor<pb::ServerReflectionRequest, pb::ServerReflectionResponse> {
 public:
  explicit ReflectionStream(const ReflectionV1Service* service) : service_(service) {
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client closed its side (or the call ended)
      Finish(grpc::Status::OK);
      return;
    }
    response_ = service_->Answer(request_, &sent_files_);
    StartWrite(&response_);
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "reflection: the answer was not sent"));
      return;
    }
    StartRead(&request_);
  }

  void OnDone() override { delete this; }

 private:
  const ReflectionV1Service* service_;
  pb::ServerReflectionRequest request_;
  pb::ServerReflectionResponse response_;
  std::vector<std::string> sent_files_;  // this stream's, by name
};

}  // namespace

ReflectionV1Service::ReflectionV1Service(std::vector<std::string> services)
    : services_([&services] {
        services.push_back(pb::ServerReflection::service_full_name());
        return std::move(services);
      }()) {}

grpc::ServerBidiReactor<pb::ServerReflectionRequest, pb::ServerReflectionResponse>*
ReflectionV1Service::ServerReflectionInfo(grpc::CallbackServerContext* /*context*/) {
  return new ReflectionStream(this);
}

pb::ServerReflectionResponse ReflectionV1Service::Answer(
    const pb::ServerReflectionRequest& request, std::vector<std::string>* sent_files) const {
  const DescriptorPool& pool = *DescriptorPool::generated_pool();
  pb::ServerReflectionResponse response;
  response.set_valid_host(request.host());
  *response.mutable_original_request() = request;
  switch (request.message_request_case()) {
    case pb::ServerReflectionRequest::kListServices:
      for (const std::string& name : services_) {
        response.mutable_list_services_response()->add_service()->set_name(name);
      }
      break;
    case pb::ServerReflectionRequest::kFileByFilename:
      if (const FileDescriptor* file = pool.FindFileByName(request.file_by_filename())) {
        AnswerFile(file, sent_files, &response);
      } else {
        SetError(grpc::StatusCode::NOT_FOUND,
                 absl::StrCat("file_by_filename: no file '", request.file_by_filename(), "'"),
                 &response);
      }
      break;
    case pb::ServerReflectionRequest::kFileContainingSymbol:
      if (const FileDescriptor* file =
              pool.FindFileContainingSymbol(request.file_containing_symbol())) {
        AnswerFile(file, sent_files, &response);
      } else {
        SetError(grpc::StatusCode::NOT_FOUND,
                 absl::StrCat("file_containing_symbol: no symbol '",
                              request.file_containing_symbol(), "'"),
                 &response);
      }
      break;
    case pb::ServerReflectionRequest::kFileContainingExtension: {
      const pb::ExtensionRequest& asked = request.file_containing_extension();
      const auto* type = pool.FindMessageTypeByName(asked.containing_type());
      const auto* extension =
          type == nullptr ? nullptr : pool.FindExtensionByNumber(type, asked.extension_number());
      if (type == nullptr) {
        SetError(grpc::StatusCode::NOT_FOUND,
                 absl::StrCat("file_containing_extension.containing_type: no message type '",
                              asked.containing_type(), "'"),
                 &response);
      } else if (extension == nullptr) {
        SetError(
            grpc::StatusCode::NOT_FOUND,
            absl::StrCat("file_containing_extension.extension_number: ", asked.extension_number(),
                         " is no extension of ", asked.containing_type()),
            &response);
      } else {
        AnswerFile(extension->file(), sent_files, &response);
      }
      break;
    }
    case pb::ServerReflectionRequest::kAllExtensionNumbersOfType:
      if (const auto* type = pool.FindMessageTypeByName(request.all_extension_numbers_of_type())) {
        std::vector<const google::protobuf::FieldDescriptor*> extensions;
        pool.FindAllExtensions(type, &extensions);
        auto* numbers = response.mutable_all_extension_numbers_response();
        numbers->set_base_type_name(type->full_name());
        for (const auto* extension : extensions) numbers->add_extension_number(extension->number());
      } else {
        SetError(grpc::StatusCode::NOT_FOUND,
                 absl::StrCat("all_extension_numbers_of_type: no message type '",
                              request.all_extension_numbers_of_type(), "'"),
                 &response);
      }
      break;
    case pb::ServerReflectionRequest::MESSAGE_REQUEST_NOT_SET:
      SetError(grpc::StatusCode::INVALID_ARGUMENT,
               "message_request: none set (one of file_by_filename, file_containing_symbol, "
               "file_containing_extension, all_extension_numbers_of_type, list_services)",
               &response);
      break;
  }
  return response;
}

}  // namespace ts::server
