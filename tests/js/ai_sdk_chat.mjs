// The stock AI SDK client (package `ai`) against ragsite's /api/chat/stream: DefaultChatTransport
// sends the UI messages, readUIMessageStream turns the answer stream into the final UI message.
// Driven by tests/chat/test_ai_sdk_client.py, which passes one JSON argument:
//   {"api": "<base>/api/chat/stream", "knowledge_base_id": "kb-1", "chat_id": "chat-1",
//    "headers": {...}, "questions": ["…", "…"]}
// Every question is one turn of the same chat (same chat id, the history resent as the hook
// would). Prints {"messages": [final assistant UI message per turn], "errors": [...]}.
import { DefaultChatTransport, readUIMessageStream } from 'ai';

const config = JSON.parse(process.argv[2]);
const transport = new DefaultChatTransport({
  api: config.api,
  headers: config.headers ?? {},
  body: { knowledge_base_id: config.knowledge_base_id },
});

const history = [];
const answers = [];
const errors = [];

for (const [index, question] of config.questions.entries()) {
  history.push({ id: `user-${index + 1}`, role: 'user', parts: [{ type: 'text', text: question }] });
  const stream = await transport.sendMessages({
    trigger: 'submit-message',
    chatId: config.chat_id,
    messageId: undefined,
    messages: history,
    abortSignal: undefined,
  });
  let last;
  for await (const message of readUIMessageStream({
    stream,
    onError: (error) => errors.push(String(error?.message ?? error)),
  })) {
    last = message;
  }
  if (last === undefined) {
    errors.push(`turn ${index + 1}: no message`);
    break;
  }
  history.push(last);
  answers.push(last);
}

process.stdout.write(JSON.stringify({ messages: answers, errors }));
