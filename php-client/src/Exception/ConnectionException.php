<?php

declare(strict_types=1);

namespace TransferSidecar\Exception;

/**
 * The daemon could not be reached, or the connection failed before a complete answer
 * (connect error, write error, read timeout, end of stream before or inside the answer).
 */
final class ConnectionException extends \RuntimeException implements SidecarException
{
}
