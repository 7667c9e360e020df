#include "titan/rl/env.h"

#include "titan/core/error.h"
#include "titan/data/utf8.h"

namespace titan::rl {

void check_env_messages(std::span<const ChatMessage> messages, std::string_view where, bool allow_empty) {
  TITAN_CHECK(allow_empty || !messages.empty(), "{}: the environment returned no messages", where);
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    TITAN_CHECK(m.role == "system" || m.role == "user" || m.role == "tool",
                "{}: message {} has role '{}'; an environment may only send system, user or tool messages", where,
                i, m.role);
    const size_t bad = data::utf8_find_invalid(m.content);
    TITAN_CHECK(bad == std::string_view::npos, "{}: message {} content is not valid UTF-8 (byte {})", where, i,
                bad);
    TITAN_CHECK(!m.reasoning_content.has_value(),
                "{}: message {} (role '{}') has reasoning_content; only assistant messages may", where, i, m.role);
  }
}

}  // namespace titan::rl
