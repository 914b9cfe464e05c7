<?php

declare(strict_types=1);

namespace TransferSidecar\Http;

/**
 * One HTTP/1.x answer: status line, headers (names lower-cased, repeats joined with ", ") and,
 * once read, the body.
 *
 * @internal
 */
final class Response
{
    public readonly string $version;
    public readonly int $status;
    public readonly string $reason;
    /** @var array<string, string> */
    public readonly array $headers;
    public readonly string $body;

    /** @param array<string, string> $headers lower-cased names */
    public function __construct(string $version, int $status, string $reason, array $headers, string $body = '')
    {
        $this->version = $version;
        $this->status = $status;
        $this->reason = $reason;
        $this->headers = $headers;
        $this->body = $body;
    }

    public function withBody(string $body): self
    {
        return new self($this->version, $this->status, $this->reason, $this->headers, $body);
    }

    public function header(string $name): ?string
    {
        return $this->headers[strtolower($name)] ?? null;
    }

    /** Whether the connection may carry another request after this answer (RFC 9112 §9.3). */
    public function keepAlive(): bool
    {
        $tokens = array_map('trim', explode(',', strtolower($this->header('connection') ?? '')));
        if (in_array('close', $tokens, true)) {
            return false;
        }
        return $this->version === '1.1' || in_array('keep-alive', $tokens, true);
    }

    /** `Keep-Alive: timeout=N` in seconds: how long the server keeps an idle connection. */
    public function keepAliveTimeout(): ?int
    {
        $value = $this->header('keep-alive');
        if ($value !== null && preg_match('/(?:^|[\s,;])timeout=(\d{1,6})/i', $value, $m) === 1) {
            return (int) $m[1];
        }
        return null;
    }

    /**
     * The body as a JSON object, or null when it is not one.
     *
     * @return array<string, mixed>|null
     */
    public function json(): ?array
    {
        try {
            $value = json_decode($this->body, true, 64, JSON_THROW_ON_ERROR);
        } catch (\JsonException) {
            return null;
        }
        return is_array($value) ? $value : null;
    }

    /**
     * The daemon's `{"error":{"code","message"}}`, with fallbacks when the body is not that.
     *
     * @return array{code: string, message: string}
     */
    public function error(): array
    {
        $error = $this->json()['error'] ?? null;
        $code = is_array($error) && is_string($error['code'] ?? null) ? $error['code'] : 'HTTP_' . $this->status;
        $message = is_array($error) && is_string($error['message'] ?? null)
            ? $error['message']
            : trim($this->reason . ' ' . substr($this->body, 0, 200));
        return ['code' => $code, 'message' => $message];
    }
}
